"""``history`` and ``bisect`` without installing anything: per-test outcome records become one
cell per subsystem, and bisect runs only the releases it needs to place each change."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lch import bisect as bisect_mod
from lch.history import Cell, ReleaseRun, markdown, write_reports
from sim.errors import HarnessError


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
    assert cell.text() == "divergence (1): slots-agree (4 calls)"


def test_a_divergence_in_a_world_vllm_does_not_build_is_labelled_outside(tmp_path: Path):
    cell = Cell()
    cell.add(rec("test_scheduler_pass_kv.py::test_m[vllm]", "divergence", property="slots-agree",
                 calls=2, outside_vllm=["encoder budget set by hand"]))
    assert cell.text() == "divergence (1): slots-agree (2 calls) [outside vLLM]"
    release = ReleaseRun("0.30.0", suite_s=1.0, cells={"scheduler_pass_kv": cell},
                         complete=True)
    assert "outside what vLLM builds: encoder budget set by hand: not a finding" in \
        markdown([release])


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
    return ReleaseRun(release, suite_s=1.0, cells=cells, complete=True)


def test_report_lists_the_matrix_and_each_divergence(tmp_path: Path):
    runs = [run("0.11.0", encoder_cache="cached-inputs-agree", tiered_lookup="pass"),
            run("0.33.0", encoder_cache="pass", tiered_lookup="pass")]
    text = markdown(runs)
    assert "| 0.11.0 |" in text and "divergence (1): cached-inputs-agree (2 calls)" in text
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


def test_a_hunt_adds_each_other_divergence_once_and_joins_the_suites_groups(tmp_path):
    suite_repro = tmp_path / "test_found.py"
    suite_repro.write_text('FINDING = "encoder_cache/slots-agree/aaaaaaaa"\n')
    cell = Cell()
    cell.add(rec("test_encoder_cache.py::test_m[vllm]", "divergence", property="slots-agree",
                 calls=4, trace=["a"], reproducer=str(suite_repro),
                 message="slots-agree: num_freeable_slots 1 != 0"))
    # Another test meeting the same cause joins its group.
    cell.add(rec("test_vllm_target.py::test_x", "divergence", property="slots-agree",
                 calls=6, reproducer=str(suite_repro), message="slots-agree: ..."))
    assert len(cell.divergences) == 1 and cell.divergences[0]["seen"] == 2
    assert cell.divergences[0]["id"] == "encoder_cache/slots-agree/aaaaaaaa"
    assert cell.divergences[0]["signature"] == "slots-agree | num_freeable_slots {value: more}"
    hunt = {"findings": [
        {"id": "encoder_cache/slots-agree/aaaaaaaa", "property": "slots-agree", "calls": 3,
         "reproducer": "small.py", "seen": 5},
        {"id": "encoder_cache/freed-not-resident/bbbbbbbb", "property": "freed-not-resident",
         "calls": 7, "reproducer": "r.py", "message": "m", "seen": 2,
         "signature": "freed-not-resident | [...] reported freed but resident"}],
        "adopted": {"encoder_cache/slots-agree/aaaaaaaa": "holders re-synchronized"},
        "examples": 300, "seconds": 9.0, "result": "failed"}
    cell.add_hunt(hunt)
    assert [d["property"] for d in cell.divergences] == ["slots-agree", "freed-not-resident"]
    assert (cell.divergences[0]["calls"], cell.divergences[0]["reproducer"]) == (3, "small.py")
    assert cell.divergences[0]["seen"] == 7
    assert cell.text() == "divergence (2): slots-agree (3 calls), freed-not-resident (7 calls)"
    text = markdown([ReleaseRun("0.26.0", cells={"encoder_cache": cell}, complete=True)])
    assert "(found by the hunt)" in text and "holders re-synchronized" in text
    assert "signature: `freed-not-resident | [...] reported freed but resident`" in text


def test_recall_names_each_known_bug_found_or_missed():
    from fixtures.upstream_bugs import UPSTREAM_BUGS, recall
    groups = {"encoder_cache": [
        {"id": "a", "property": "freed-not-resident",
         "signature": "freed-not-resident | [...] reported freed but resident"},
        {"id": "b", "property": "slots-agree",
         "signature": "slots-agree | num_freeable_slots {value: more}"}],
        "tiered_lookup": []}
    got = {k["bug"]: k["found"] for k in recall("0.26.0", groups)}
    affecting = {b.id for b in UPSTREAM_BUGS if b.affects("0.26.0")}
    assert set(got) == affecting
    assert got["enc-stale-freed"] and got["enc-repeat-item"]
    assert got["window-pending-cut-off"] is False          # the tiered cell found nothing
    assert "enc-cached-inputs-unrecorded" not in got         # fixed in 0.24.0
    assert got["sched-unchunked-at-start"] is None           # its column did not run
    # One group is credited to one bug only.
    twice = recall("0.14.0", {"scheduler_pass": [
        {"id": "s", "property": "scheduler-output-agrees",
         "signature": "scheduler-output-agrees | {num_scheduled_tokens: extra key, "
                      "num_scheduled_tokens['rN']: more}"}]})
    found = [k["bug"] for k in twice if k["found"]]
    assert found == ["sched-unchunked-at-start"], twice       # matches both: credited once


def test_a_release_that_crashes_keeps_the_others_and_every_cell_is_written(monkeypatch,
                                                                           tmp_path):
    """The report and the record are rewritten as cells complete: a run killed during
    release 3 leaves releases 1 and 2 (and release 3's finished cells) on disk."""
    import argparse
    import json

    from lch import history
    written_states: list[list[str]] = []

    def fake_run(release, venv_dir, out_dir, args, suites=None, hunt_examples=0,
                 hunt_budget=None, written=lambda run: None):
        if release == "0.30.0":
            raise RuntimeError("torch missing")       # a crash inside the release
        done = run(release, encoder_cache="slots-agree", tiered_lookup="pass")
        written(done)                               # a cell completes
        written_states.append(json.loads((tmp_path / "history-report.json").read_text())
                              ["releases"][-1]["release"])
        done.complete = True
        return done

    monkeypatch.setattr(history, "run_release", fake_run)
    args = argparse.Namespace(releases="0.14.0,0.26.0,0.30.0", first=None, last=None,
                              report_dir=str(tmp_path), reproducer_dir=str(tmp_path / "r"),
                              record_dir=str(tmp_path / "results"), venv_dir=str(tmp_path),
                              pytest_args=[], hunt_examples=0, hunt_budget="5s",
                              no_hunt=False, subsystem=None)
    assert history.main(args) == 1
    assert written_states == ["0.14.0", "0.26.0"]       # each written while under way
    data = json.loads((tmp_path / "history-report.json").read_text())
    assert [r["release"] for r in data["releases"]] == ["0.14.0", "0.26.0", "0.30.0"]
    assert "torch missing" in data["releases"][2]["error"]
    (record,) = (tmp_path / "results" / "history").glob("*.json")
    items = json.loads(record.read_text())["items"]
    assert {i["release"] for i in items} == {"0.14.0", "0.26.0", "0.30.0"}


def test_a_class_the_release_has_but_the_harness_cannot_drive_is_unavailable_not_absent():
    cell = Cell()
    cell.add(rec("test_tiered_lookup.py::t", "pass", missing=[
        "unavailable: ARC: vLLM 0.14.0 ships an ARC policy ...",
        "secondary tiers: vLLM 0.14.0 has no TieringOffloadingManager"]))
    assert cell.outcome == "pass" and cell.text() == "pass*; unavailable: ARC"
    assert cell.notes == ["secondary tiers: vLLM 0.14.0 has no TieringOffloadingManager"]
    text = markdown([ReleaseRun("0.14.0", cells={"tiered_lookup": cell}, complete=True)])
    unavailable = text.split("## Unavailable: the release has it")[1].split("##")[0]
    assert "ARC: vLLM 0.14.0 ships an ARC policy" in unavailable
    assert "ARC" not in text.split("## Absent from the release")[1]


def test_the_hunts_run_under_the_hunt_profile_in_the_suite_environment():
    from lch import venvs
    env = venvs.suite_env(HYPOTHESIS_PROFILE="hunt")
    assert env["HYPOTHESIS_PROFILE"] == "hunt" and env["LCH_REQUIRE_TARGETS"] == "1"


def test_a_scenario_meeting_a_machines_cause_joins_its_group():
    # vLLM 0.27.0's first-in first-out reuse, met by the machine (a program, a reproducer)
    # and by a scenario (a value compared, no call named): out of order alike, one group.
    cell = Cell()
    cell.add(rec("test_prefix_cache_scenarios.py::test_caching_off[vllm]", "divergence",
                 property="free-queue-agrees",
                 message="free-queue-agrees: (3, 4, 2, 1) != expected (2, 1, 3, 4)"))
    cell.add(rec("test_prefix_cache.py::test_prefix_cache_machine[vllm]", "divergence",
                 property="free-queue-agrees", calls=4, reproducer="r.py", message=(
                     "free-queue-agrees: free_queue() returned (2, 1), the model expects "
                     "(1, 2)")))
    group, = cell.divergences
    assert group["seen"] == 2 and group["calls"] == 4 and group["reproducer"] == "r.py"
    # A difference of another shape (a block missing, not out of order) is another cause.
    cell.add(rec("test_prefix_cache_scenarios.py::test_other[vllm]", "divergence",
                 property="free-queue-agrees",
                 message="free-queue-agrees: (3, 4) != expected (2, 3, 4)"))
    assert len(cell.divergences) == 2


def test_a_column_is_hunted_in_its_further_machines_too(tmp_path, monkeypatch):
    # The prefix cache's hybrid pools' and DCP's bugs live in the worlds of its further
    # machines; a hunt of the main machine alone met them in one world in a hundred.
    from lch import history
    commands = []

    def fake(command, **kwargs):
        commands.append(command)
        return subprocess.CompletedProcess(command, 2, "", "")
    monkeypatch.setattr(history.subprocess, "run", fake)
    run = ReleaseRun("0.34.0", cells={"prefix_cache": Cell("pass"),
                                      "encoder_cache": Cell("pass")})
    history.hunt_cells(run, Path("python"), tmp_path, "1s", None)
    named = [[c[n + 1] for n, arg in enumerate(c) if arg == "--subsystem"] for c in commands]
    scopes = {names[0]: names for names in named}
    assert scopes["prefix_cache"] == ["prefix_cache", "prefix_cache.hybrid",
                                      "prefix_cache.hybrid_eagle",
                                      "prefix_cache.hybrid_scaled_eagle", "prefix_cache.dcp"]
    assert scopes["encoder_cache"] == ["encoder_cache"]
    assert run.cells["prefix_cache"].notes == [
        f"hunt exited 2: see {tmp_path / 'hunt-prefix_cache' / 'hunt.log'}"]


KILLED_RUN = '''
import sys, time
from lch import history
from lch.test_history import run

def fake_run(release, venv_dir, out_dir, args, suites=None, hunt_examples=0,
             hunt_budget=None, written=lambda run: None):
    if release == "0.30.0":
        time.sleep(600)                  # killed here, in its third release
    done = run(release, encoder_cache="slots-agree", tiered_lookup="pass")
    return done

history.run_release = fake_run
sys.exit(history.main(history_args))
'''


def test_a_history_run_killed_in_its_third_release_leaves_the_first_two(tmp_path):
    """SIGKILL, not an exception: nothing runs after it, so what is on disk is what was
    written as the releases completed."""
    import json
    import signal
    import subprocess
    import sys
    import time

    args = (f"import argparse; history_args = argparse.Namespace(releases='0.14.0,0.26.0,0.30.0',"
            f" first=None, last=None, report_dir={str(tmp_path)!r}, reproducer_dir="
            f"{str(tmp_path / 'r')!r}, record_dir={str(tmp_path / 'results')!r}, venv_dir="
            f"{str(tmp_path)!r}, pytest_args=[], hunt_examples=0, hunt_budget='5s', "
            f"no_hunt=False, subsystem=None)\n")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-c", args + KILLED_RUN], cwd=root,
                            env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    report = tmp_path / "history-report.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if report.exists() and len(json.loads(report.read_text())["releases"]) == 2:
            break
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    data = json.loads(report.read_text())
    assert [r["release"] for r in data["releases"]] == ["0.14.0", "0.26.0"]
    assert all(r["complete"] for r in data["releases"])
    assert "0.26.0" in (tmp_path / "history-report.md").read_text()
    (record,) = (tmp_path / "results" / "history").glob("*.json")
    assert {i["release"] for i in json.loads(record.read_text())["items"]} == {"0.14.0",
                                                                              "0.26.0"}


def test_subsystem_runs_only_its_columns_suites_and_records_only_its_cells(monkeypatch,
                                                                           tmp_path):
    """``--subsystem tiered_lookup``: the release runs that column's suites alone and the
    record holds its cell alone (no other column shown absent); a wrong name stops first."""
    import argparse
    import json

    from lch import history
    asked: list[dict] = []

    def fake_run(release, venv_dir, out_dir, args, suites=None, hunt_examples=0,
                 hunt_budget=None, written=lambda run: None):
        asked.append(suites)
        done = run(release, tiered_lookup="pass")
        done.complete = True
        return done

    monkeypatch.setattr(history, "run_release", fake_run)
    args = argparse.Namespace(releases="0.26.0", first=None, last=None,
                              report_dir=str(tmp_path), reproducer_dir=str(tmp_path / "r"),
                              record_dir=str(tmp_path / "results"), venv_dir=str(tmp_path),
                              pytest_args=[], hunt_examples=0, hunt_budget="5s",
                              no_hunt=False, subsystem=["tiered_lookup"])
    assert history.main(args) == 0
    assert set(asked[0].values()) == {"tiered_lookup"}
    assert "properties/test_tiered_lookup_policies.py" in asked[0]
    (record,) = (tmp_path / "results" / "history").glob("*.json")
    assert record.name == "0.26.0-tiered_lookup.json"       # not the whole run's name
    assert {i["column"] for i in json.loads(record.read_text())["items"]} == {"tiered_lookup"}
    args.subsystem = ["tiered"]
    with pytest.raises(HarnessError, match="not a history column"):
        history.main(args)


def test_two_machines_meeting_one_cause_are_one_group(tmp_path):
    """Two machines of a column (ids carry their names) with the same property and
    signature: one group, seen twice; another shape stays its own."""
    paths = []
    for n, scope in enumerate(("prefix_cache.hybrid_eagle", "prefix_cache.hybrid_scaled_eagle")):
        path = tmp_path / f"test_{n}.py"
        path.write_text(f'FINDING = "{scope}/hit-agrees/59fe398e"\n')
        paths.append(path)
    message = ("hit-agrees: get_computed_blocks returned Hit(block_ids=((), ()), "
               "num_computed_tokens=0, shared_prefix_boundary={b}), the model expects "
               "Hit(block_ids=((1,), (2, 4)), num_computed_tokens={n}, "
               "shared_prefix_boundary=0)")
    cell = Cell()
    for n, path in enumerate(paths):
        cell.add(rec(f"test_prefix_cache.py::test_{n}[vllm]", "divergence",
                     property="hit-agrees", calls=5, reproducer=str(path),
                     message=message.format(b=8 - 2 * n, n=8 - 2 * n)))
    assert len(cell.divergences) == 1 and cell.divergences[0]["seen"] == 2
    other = tmp_path / "test_2.py"
    other.write_text('FINDING = "prefix_cache.hybrid_eagle/hit-agrees/0badcafe"\n')
    cell.add(rec("test_prefix_cache.py::test_2[vllm]", "divergence", property="hit-agrees",
                 calls=4, reproducer=str(other),
                 message=message.replace("num_computed_tokens=0", "num_computed_tokens=9")
                 .format(b=8, n=8)))
    assert len(cell.divergences) == 2
