"""Result records and the documents' generated blocks: the committed blocks are what the
committed records give (a figure in a block always has its record), and a stale block or a
block with no renderer is caught."""

from __future__ import annotations

import json
import subprocess

import pytest

from lch import records


def test_every_generated_block_matches_the_committed_records():
    stale = records.render(check=True)
    assert not stale, (f"{[str(p) for p in stale]} differ from results/: run "
                       "`python -m lch.records render` and commit the result")


def test_a_record_says_what_where_and_when(tmp_path):
    record = records.envelope("bench", "demo", "nox -s bench", vllm=None, wall_s=1.25,
                              summary={"x": 1}, items=[{"id": "a", "outcome": "pass"}])
    path = records.write(record, tmp_path)
    back = json.loads(path.read_text())
    assert back["schema"] == records.SCHEMA and back["kind"] == "bench"
    assert back["harness"]["commit"] and back["machine"]["cores"] >= 1
    assert back["machine"]["python"] and back["wall_s"] == round(1.25, 1)
    assert records.load("bench", tmp_path)[0]["items"] == [{"id": "a", "outcome": "pass"}]


def test_a_superseded_record_leaves_the_tree_clean_and_code_does_not(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.json").write_text("{}\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    assert records.harness_commit(tmp_path)["dirty"] is False
    (tmp_path / "results" / "r.json").write_text('{"re-run": true}\n')
    assert records.harness_commit(tmp_path)["dirty"] is False    # the run's own output
    (tmp_path / "code.py").write_text("x = 2\n")
    assert records.harness_commit(tmp_path)["dirty"] is True


def test_a_stale_block_is_caught_and_rewritten(tmp_path):
    (tmp_path / "results").mkdir()
    doc = tmp_path / "README.md"
    doc.write_text("intro\n<!-- generated: records-index -->\nold figures\n"
                   "<!-- end generated -->\nafter\n")
    assert records.render(check=True, root=tmp_path) == [doc]
    assert "old figures" in doc.read_text()                   # --check changes nothing
    records.render(root=tmp_path)
    assert "(none yet)" in doc.read_text() and "old figures" not in doc.read_text()
    assert records.render(check=True, root=tmp_path) == []


def test_a_block_without_a_renderer_is_an_error(tmp_path):
    (tmp_path / "README.md").write_text("<!-- generated: no-such-block -->\nx\n"
                                        "<!-- end generated -->\n")
    with pytest.raises(ValueError, match="no-such-block.*no renderer"):
        records.render(check=True, root=tmp_path)


def test_a_record_of_another_schema_is_refused(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "old.json").write_text('{"name": "old"}')
    with pytest.raises(ValueError, match="not lch-result/1"):
        records.load("bench", tmp_path)


def test_the_prefix_cache_line_is_what_its_history_cells_say(tmp_path):
    from lch.record_blocks import findings

    def cell(release, outcome):
        return {"release": release, "column": "prefix_cache", "outcome": outcome, "groups": []}

    def history(name, started, *items):
        record = records.envelope(
            "history", name, "python -m lch.cli history", vllm=None, wall_s=1.0,
            summary={"releases": [{"release": "0.11.0"}], "hunt_budget": "60s"}, items=items)
        records.write({**record, "started": started}, tmp_path)

    history("demo-prefix_cache", "2026-12-01T00:00:00+00:00", cell("0.11.0", "divergence"),
            cell("0.12.0", "pass"), cell("0.10.2", "unavailable"), cell("0.13.0", "divergence"))
    # A later run (a corrected harness) passes 0.13.0: the release is judged by it.
    history("later-prefix_cache", "2026-12-02T00:00:00+00:00", cell("0.13.0", "pass"))
    line = findings(tmp_path).splitlines()[-1]
    assert line.startswith("Prefix cache")
    assert "diverged on 0.11.0;" in line and "passed on 0.12.0, 0.13.0;" in line
    assert "could not run on 0.10.2 " in line
    assert "superseded by a later run: 0.13.0 diverged " in line


def test_a_known_bug_is_listed_once_per_release_and_a_miss_without_hunts_says_so(tmp_path):
    from fixtures.upstream_bugs import UPSTREAM_BUGS
    from lch.record_blocks import _found_in_records

    bug = UPSTREAM_BUGS[0]
    release = bug.since

    def run(name, budget, found):
        item = {"release": release, "column": bug.column, "outcome": "divergence",
                "groups": [], "known_found": [bug.id] if found else []}
        records.write(records.envelope(
            "history", name, "python -m lch.cli history", vllm=None, wall_s=1.0,
            summary={"releases": [{"release": release}], "hunt_budget": budget},
            items=[item]), tmp_path)

    run("a", "0 examples", found=False)
    assert _found_in_records(bug, tmp_path) == (f"- (missed on {release}, by the suites "
                                                "alone: no hunt ran)")
    run("b", "2m", found=False)
    assert _found_in_records(bug, tmp_path) == f"- (missed on {release})"
    run("c", "2m", found=True)
    run("d", "2m", found=True)
    assert _found_in_records(bug, tmp_path) == release


def test_the_session_recall_lists_only_records_of_every_subsystems_suites(tmp_path):
    from lch.record_blocks import vllm_session_recall
    from sim.manifests import vllm_suites
    every = " ".join(vllm_suites([]))
    one = "properties/test_prefix_cache_mamba_world.py"
    for name, tests in (("session", every), ("one-world", one)):
        record = records.envelope(
            "suites", name, f"HYPOTHESIS_PROFILE=vllm python -m lch.measure pytest -- {tests}",
            vllm={"version": "0.33.0"}, wall_s=1.0,
            summary={"known_divergences": {"pc-full-report-placeholders": [one]}}, items=[])
        records.write(record, tmp_path)
    table = vllm_session_recall(tmp_path)
    assert "`results/suites/session.json`" in table
    # one subsystem's world does not miss the other subsystems' bugs: it never looks
    assert "one-world" not in table
