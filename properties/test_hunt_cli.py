"""The hunt as a user runs it, in a real subprocess: coverage decided before the hunt,
nothing lost (unwritable directories, Ctrl-C, SIGTERM), seeds that replay exactly, the
database's replays apart, help that teaches, ``replay`` passing pytest's arguments through.

Each test runs the CLI from a temporary directory (its ``.hypothesis/`` and reports stay
there) with small budgets; they are the slow end of ``nox -s tests``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HYPOTHESIS_PROFILE": "hunt", **(env or {})}
    command = [sys.executable, "-m", "lch.cli", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def report(directory: Path) -> dict:
    return json.loads((directory / "hunt-report.json").read_text())


def pairs(data: dict) -> dict:
    return {(p["subsystem"], p["target"]): p for p in data["pairs"]}


# -- coverage decided before the hunt -----------------------------------------------------------

def test_bug_target_hunts_only_the_subsystems_the_bug_acts_in(tmp_path):
    done = cli("hunt", "--target", "native:offload-id-reuse", "--examples", "10", "--no-db",
               "--seed", "1", cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr        # no "belongs to" error
    found = pairs(report(tmp_path))
    assert found[("offload_engine", "native:offload-id-reuse")]["examples"] > 0
    for subsystem in ("encoder_cache", "scheduler_pass", "tiered_lookup"):
        entry = found[(subsystem, "native:offload-id-reuse")]
        assert entry["result"] == "not applicable" and entry["examples"] == 0
    assert "not applicable" in (tmp_path / "hunt-report.md").read_text()


@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is not None,
                    reason="checks the behaviour without vLLM")
def test_missing_vllm_is_an_error_unless_skips_are_allowed(tmp_path):
    done = cli("hunt", "--target", "native", "--target", "vllm", "--examples", "5",
               cwd=tmp_path)
    assert done.returncode == 2 and "vLLM is not installed" in done.stderr
    assert "SEED=" not in done.stdout and not (tmp_path / "hunt-report.json").exists()
    done = cli("hunt", "--target", "native", "--target", "vllm", "--subsystem",
               "encoder_cache", "--examples", "5", "--allow-skip", "--no-db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert pairs(report(tmp_path))[("encoder_cache", "vllm")]["result"] == "could not run"


def test_a_pair_without_examples_is_not_run_and_not_green(tmp_path):
    done = cli("hunt", "--budget", "0.01s", "--no-db", cwd=tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr
    results = {p["result"] for p in report(tmp_path)["pairs"]}
    assert "no failure" not in results and "not run" in results


# -- nothing lost ---------------------------------------------------------------------------------

@pytest.mark.parametrize("option", ["--reproducer-dir", "--report-dir"])
def test_unwritable_directory_stops_before_any_work(tmp_path, option):
    done = cli("hunt", option, "/proc/lch-no-such-dir", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""                                 # no SEED: nothing started
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{option} /proc/lch-no-such-dir is not writable" in lines[0]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_hunt_keeps_report_and_reproducers(tmp_path, signum):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HYPOTHESIS_PROFILE": "hunt"}
    hunt = subprocess.Popen(
        [sys.executable, "-m", "lch.cli", "hunt", "--budget", "10m", "--seed", "7", "--no-db",
         "--subsystem", "encoder_cache", "--target", "native:enc-stale-freed",
         "--target", "native", "--reproducer-dir", "found"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    deadline = time.monotonic() + 300
    for line in hunt.stdout:                # wait until the planted bug is found
        lines.append(line)
        if "native:enc-stale-freed" in line and "FAILED" in line:
            break
        assert time.monotonic() < deadline, "".join(lines)
    time.sleep(1.0)                         # the native pair is now mid-round
    hunt.send_signal(signum)
    out, err = hunt.communicate(timeout=120)
    assert hunt.returncode == 130, "".join(lines) + out + err
    assert "Traceback" not in err, err
    data = report(tmp_path)
    assert data["interrupted"] is True
    found = pairs(data)[("encoder_cache", "native:enc-stale-freed")]["failure"]
    assert found["property"] == "freed-not-resident"
    assert (tmp_path / found["reproducer"]).is_file()
    assert "Interrupted" in (tmp_path / "hunt-report.md").read_text()
    assert not list(tmp_path.glob("**/.*tmp*"))              # atomic writes: no leftovers


def test_a_killed_hunt_leaves_its_findings_in_a_partial_report(tmp_path):
    """SIGKILL (what ``hunt --workers`` sends a worker deaf to SIGTERM) gives no chance to
    write a report: the checkpoint written at each new finding is what is left, marked
    partial, its finding and reproducer in it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HYPOTHESIS_PROFILE": "hunt"}
    hunt = subprocess.Popen(
        [sys.executable, "-m", "lch.cli", "hunt", "--budget", "10m", "--seed", "7", "--no-db",
         "--workers", "1", "--subsystem", "encoder_cache", "--target", "native:enc-stale-freed",
         "--target", "native", "--reproducer-dir", "found"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    try:
        # Polled, not read off the progress line: the line is printed before the checkpoint.
        while not (tmp_path / "hunt-report.json").exists():
            assert hunt.poll() is None and time.monotonic() < deadline, "no checkpoint"
            time.sleep(0.2)
        time.sleep(0.5)                     # the hunt is now past its checkpoint
    finally:
        hunt.kill()
        hunt.communicate(timeout=60)
    data = report(tmp_path)
    assert data["partial"] is True and data["interrupted"] is False
    found = pairs(data)[("encoder_cache", "native:enc-stale-freed")]["findings"]
    assert [f["property"] for f in found] == ["freed-not-resident"], found
    assert (tmp_path / found[0]["reproducer"]).is_file()
    assert "**Partial**" in (tmp_path / "hunt-report.md").read_text()


# -- seeds replay exactly; the database apart ------------------------------------------------

def _generated(data: dict) -> list:
    keep = ("subsystem", "target", "result", "examples", "steps", "events", "failure",
            "trace_hash")
    return [{k: p[k] for k in keep} for p in data["pairs"]]


def test_same_seed_and_examples_same_hunt_whatever_the_database_holds(tmp_path):
    args = ("hunt", "--seed", "11", "--examples", "40", "--subsystem", "encoder_cache",
            "--target", "native:enc-stale-freed", "--target", "native")
    first = cli(*args, cwd=tmp_path)                 # database on: saves the failure
    assert first.returncode == 1, first.stdout + first.stderr
    data_first = report(tmp_path)
    second = cli(*args, cwd=tmp_path)                # the database now holds it
    data_second = report(tmp_path)
    assert second.returncode == 1
    assert _generated(data_second) == _generated(data_first)
    replay = pairs(data_second)[("encoder_cache", "native:enc-stale-freed")]
    assert replay["database_replay"]["property"] == "freed-not-resident"
    assert "replayed from the example database" in (tmp_path / "hunt-report.md").read_text()
    third = cli(*args, "--no-db", cwd=tmp_path)
    assert _generated(report(tmp_path)) == _generated(data_first)
    assert pairs(report(tmp_path))[("encoder_cache", "native:enc-stale-freed")][
        "database_replay"] is None
    assert third.returncode == 1


def test_report_ends_with_the_command_that_reruns_the_failure(tmp_path):
    done = cli("hunt", "--seed", "1", "--examples", "300", "--no-db", "--target",
               "native:enc-stale-freed", "--subsystem", "encoder_cache", cwd=tmp_path)
    assert done.returncode == 1
    markdown = (tmp_path / "hunt-report.md").read_text()
    rerun = markdown.split("## Rerun")[1]
    command = [line.strip().strip("`") for line in rerun.splitlines() if "lch.cli hunt" in line]
    assert command, markdown
    again = cli(*command[0].split()[3:], "--report-dir", "again", cwd=tmp_path)
    assert again.returncode == 1
    assert report(tmp_path / "again")["pairs"][0]["failure"]["reproducer"] == \
        report(tmp_path)["pairs"][0]["failure"]["reproducer"]


# -- past the first bug: every divergence, --accept -------------------------------------------

TWO_BUGS = "native:enc-stale-freed+enc-repeat-item"      # slots-agree and freed-not-resident
PAST_FIRST = ("hunt", "--seed", "1", "--examples", "300", "--no-db", "--subsystem",
              "encoder_cache", "--reproducer-dir", "found")


@pytest.fixture(scope="module")
def two_bug_hunt(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("two-bugs")
    done = cli(*PAST_FIRST, "--target", TWO_BUGS, cwd=cwd)
    assert done.returncode == 1, done.stdout + done.stderr
    return cwd, report(cwd)["pairs"][0]


def test_two_bugs_in_one_subsystem_each_reported_with_its_reproducer(two_bug_hunt):
    cwd, pair = two_bug_hunt
    found = pair["findings"]
    # Two bugs planted, exactly two findings: one group per cause, however many programs.
    assert sorted(f["property"] for f in found) == ["freed-not-resident", "slots-agree"], found
    assert len({f["reproducer"] for f in found}) == 2
    for f in found:               # each file names its finding: --accept takes either
        assert f"FINDING = {f['id']!r}" in (cwd / f["reproducer"]).read_text()
        assert f["signature"].startswith(f["property"] + " | ")
    # The hunt went on past each: examples met them again, adopted the target's behaviour
    # there and went on; they are counted in the group, not reported again.
    assert all(f["seen"] > 1 for f in found), found
    assert set(pair["adopted"]) == {f["id"] for f in found}, pair["adopted"]
    assert "re-synchronized" in pair["adopted"][next(
        f["id"] for f in found if f["property"] == "slots-agree")]
    markdown = (cwd / "hunt-report.md").read_text()
    assert all(f["id"] in markdown and f["signature"] in markdown for f in found)
    assert "Went on past" in markdown


def test_accept_the_first_finding_and_the_hunt_reports_only_the_other(two_bug_hunt, tmp_path):
    cwd, pair = two_bug_hunt
    first, second = pair["findings"]
    done = cli(*PAST_FIRST, "--target", TWO_BUGS, "--accept", first["id"], cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    again = report(tmp_path)["pairs"][0]
    assert [f["id"] for f in again["findings"]] == [second["id"]]
    assert [(a["id"], a["seen"] > 0) for a in again["accepted"]] == [(first["id"], True)]
    # Both accepted (one by id, one by its reproducer file): nothing new, exit 0.
    done = cli(*PAST_FIRST, "--target", TWO_BUGS, "--accept", first["id"],
               "--accept", str(cwd / second["reproducer"]), "--report-dir", "both",
               cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    both = report(tmp_path / "both")["pairs"][0]
    assert both["findings"] == [] and both["result"] == "accepted only"
    assert {a["id"] for a in both["accepted"]} == {first["id"], second["id"]}


def test_a_bad_accept_stops_before_any_work(tmp_path):
    done = cli("hunt", "--accept", "encoder_cache/slots-agree", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert "neither a finding id" in line and "hunt-report.md" in line


OLD_RELEASE = "0.26.0"      # encoder cache: slots-agree (repeated item) and issue #38551
OLD_PYTHON = os.environ.get("LCH_VLLM_0_26_PYTHON") or str(
    Path(os.environ.get("LCH_VENV_DIR") or ROOT / ".nox" / "bisect")
    / f"vllm-{OLD_RELEASE}" / "bin" / "python")


@pytest.mark.skipif(not Path(OLD_PYTHON).exists(), reason=(
    f"needs vLLM {OLD_RELEASE}: python -m lch.venvs {OLD_RELEASE} (makes .nox/bisect/"
    f"vllm-{OLD_RELEASE}), or set LCH_VLLM_0_26_PYTHON to a python that imports it"))
def test_old_release_reports_both_encoder_cache_divergences(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HYPOTHESIS_PROFILE": "hunt",
           "VLLM_TARGET_DEVICE": "cpu"}
    done = subprocess.run([OLD_PYTHON, "-m", "lch.cli", *PAST_FIRST, "--target", "vllm"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 1, done.stdout + done.stderr
    data = report(tmp_path)
    assert data["vllm"]["version"] == OLD_RELEASE
    found = [f["property"] for f in data["pairs"][0]["findings"]]
    # Both bugs, each once (before signatures the repeated item was two ids).
    assert sorted(found) == ["freed-not-resident", "slots-agree"], data["pairs"][0]["findings"]


# -- help, summary, replay ------------------------------------------------------------------------

def test_hunt_help_lists_targets_bugs_and_coverage(tmp_path):
    text = cli("hunt", "--help", cwd=tmp_path).stdout
    for needle in ("native:enc-stale-freed", "native:offload-id-reuse", "vllm",
                   "offload_engine", "not implemented", "--allow-skip", "--vllm-path"):
        assert needle in text, needle


def test_step_summary_gets_the_markdown(tmp_path):
    summary = tmp_path / "summary.md"
    done = cli("hunt", "--examples", "5", "--no-db", "--subsystem", "tiered_lookup",
               cwd=tmp_path, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert done.returncode == 0, done.stderr
    assert summary.read_text() == (tmp_path / "hunt-report.md").read_text()


def _reproducers(tmp_path: Path) -> Path:
    found = tmp_path / "fixtures" / "reproducers"
    found.mkdir(parents=True)
    for name in ("decode_one", "seed001_two"):
        (found / f"test_{name}.py").write_text(f"def test_{name}():\n    assert True\n")
    return found


@pytest.mark.parametrize("args, code, ran", [
    (["fixtures/reproducers", "-k", "decode"], 0, "1 passed"),
    (["--", "-k", "seed001"], 0, "1 passed"),
    (["-k", "seed001 or decode"], 0, "2 passed"),
    (["-k", "nothing_matches"], 5, "deselected"),
])
def test_replay_passes_pytest_arguments_through(tmp_path, args, code, ran):
    _reproducers(tmp_path)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = cli("replay", *args, cwd=tmp_path)
    assert done.returncode == code, done.stdout + done.stderr
    assert ran in done.stdout


@pytest.mark.parametrize("args, code", [([], 3), (["--allow-skip"], 0)])
def test_replay_that_skipped_a_reproducer_is_no_pass(tmp_path, args, code):
    """A reproducer that could not run (vLLM missing) makes replay exit 3 unless skips are
    allowed; a strict xfail (an affected release) counts as run."""
    found = _reproducers(tmp_path)
    (found / "test_needs_vllm.py").write_text(
        "import pytest\n\ndef test_needs_vllm():\n    pytest.skip('vLLM is not installed')\n")
    (found / "test_affected.py").write_text(
        "import pytest\n\n@pytest.mark.xfail(strict=True, raises=AssertionError)\n"
        "def test_affected():\n    assert 1 == 2\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = cli("replay", *args, cwd=tmp_path)
    assert done.returncode == code, done.stdout + done.stderr
    if code:
        assert "1 reproducer(s) could not run (vLLM is not installed), 3 ran" in done.stderr


def test_replay_where_every_reproducer_skipped_fails_even_with_skips_allowed(tmp_path):
    found = tmp_path / "fixtures" / "reproducers"
    found.mkdir(parents=True)
    (found / "test_needs_vllm.py").write_text(
        "import pytest\n\ndef test_needs_vllm():\n    pytest.skip('vLLM is not installed')\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = cli("replay", "--allow-skip", cwd=tmp_path)
    assert done.returncode == 3 and "nothing was checked" in done.stderr, done.stderr
