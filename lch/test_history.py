"""``history`` and ``bisect`` without installing anything: per-test outcome records become one
cell per subsystem, and bisect runs only the releases it needs to place each change."""

from __future__ import annotations

from pathlib import Path

import pytest

from lch import bisect as bisect_mod
from lch.history import Cell, ReleaseRun, markdown, write_reports


def rec(test: str, outcome: str, **extra) -> dict:
    return {"nodeid": f"properties/{test}", "outcome": outcome, **extra}


def test_a_cell_is_the_worst_of_its_tests_and_keeps_every_finding():
    cell = Cell()
    cell.add(rec("test_encoder_cache.py::test_m[vllm]", "pass"))
    cell.add(rec("test_vllm_target.py::test_x", "unavailable", message="call(): TypeError"))
    assert cell.outcome == "unavailable"
    cell.add(rec("test_encoder_cache.py::test_m[vllm]", "divergence", property="slots-agree",
                 calls=4, trace=["a", "b"], reproducer="r.py"))
    cell.add(rec("test_vllm_target.py::test_hazards", "skipped", message="n/a"))
    assert cell.outcome == "divergence" and cell.tests == 3
    assert cell.divergences[0]["property"] == "slots-agree"
    assert cell.unavailable == ["test_x: call(): TypeError"]
    assert cell.text() == "divergence: slots-agree (4 calls)"


def test_absent_and_missing_configurations_are_notes_not_failures():
    cell = Cell()
    cell.add(rec("test_tiered_lookup.py::t", "pass", missing=["secondary tiers: absent"]))
    assert (cell.outcome, cell.text(), cell.notes) == ("pass", "pass*",
                                                       ["secondary tiers: absent"])
    absent = Cell()
    absent.add(rec("test_tiered_lookup_vllm_scans.py::t", "absent", message="no scans"))
    assert absent.outcome == "absent" and absent.notes == ["no scans"]


def run(release: str, **states: str) -> ReleaseRun:
    """A finished release run: ``column=pass`` or ``column=<property>``."""
    cells = {}
    for column, state in states.items():
        cell = Cell()
        cell.add(rec("t.py::t", "pass") if state == "pass" else
                 rec("t.py::t", "divergence", property=state, calls=2))
        cells[column] = cell
    return ReleaseRun(release, suite_s=1.0, cells=cells)


def test_report_lists_the_matrix_and_each_divergence(tmp_path: Path):
    runs = [run("0.11.0", encoder_cache="cached-inputs-agree", tiered_lookup="pass"),
            run("0.33.0", encoder_cache="pass", tiered_lookup="pass")]
    text = markdown(runs)
    assert "| 0.11.0 |" in text and "divergence: cached-inputs-agree (2 calls)" in text
    assert "**0.11.0 encoder_cache**: `cached-inputs-agree`" in text
    write_reports(runs, tmp_path)
    assert (tmp_path / "history-report.json").read_text().count('"release"') == 2


@pytest.mark.parametrize("flip", [1, 4, 6])
def test_bisect_places_each_change_between_neighbours(monkeypatch, tmp_path: Path, flip: int):
    releases = [f"0.{20 + k}.0" for k in range(8)]
    ran: list[str] = []

    def fake_run(release, venv_dir, out_dir, pytest_args, suites):
        ran.append(release)
        k = releases.index(release)
        return run(release, encoder_cache="pass" if k >= flip else "slots-agree",
                   tiered_lookup="pass")

    monkeypatch.setattr(bisect_mod, "run_release", fake_run)
    runs = bisect_mod.bisect(releases, True, tmp_path, tmp_path, [],
                             {"a.py": "encoder_cache", "b.py": "tiered_lookup"})
    assert len(ran) < len(releases) and len(set(ran)) == len(ran)
    found = bisect_mod.changes(runs, ["encoder_cache", "tiered_lookup"])
    assert found == [f"- encoder_cache: divergence slots-agree fixed: last {releases[flip - 1]} "
                     f"(slots-agree), first {releases[flip]} (pass)"]


def test_a_hunt_past_the_first_bug_adds_each_other_divergence_once(tmp_path):
    suite_repro = tmp_path / "test_found.py"
    suite_repro.write_text('FINDING = "encoder_cache/slots-agree/aaaaaaaa"\n')
    cell = Cell()
    cell.add(rec("test_encoder_cache.py::test_m[vllm]", "divergence", property="slots-agree",
                 calls=4, trace=["a"], reproducer=str(suite_repro)))
    assert cell.divergences[0]["id"] == "encoder_cache/slots-agree/aaaaaaaa"
    hunt = {"findings": [
        {"id": "encoder_cache/slots-agree/aaaaaaaa", "property": "slots-agree", "calls": 4},
        {"id": "encoder_cache/freed-not-resident/bbbbbbbb", "property": "freed-not-resident",
         "calls": 7, "reproducer": "r.py", "message": "m"}]}
    cell.add_hunt(hunt)
    cell.add_hunt(hunt)                              # the same findings again: no new row
    assert [d["property"] for d in cell.divergences] == ["slots-agree", "freed-not-resident"]
    assert cell.text() == "divergence: slots-agree (4 calls), freed-not-resident (7 calls)"
    assert "(hunt past the first bug)" in markdown([ReleaseRun("0.26.0",
                                                              cells={"encoder_cache": cell})])
