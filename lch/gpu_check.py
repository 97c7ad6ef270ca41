"""``tools/gpu_check.sh``'s verdicts and its record: the script runs each step time-boxed; this
module judges what the step left behind and writes the one result record of the run.

    python -m lch.gpu_check step NAME --dir LOGS --rc RC --seconds S --limit L -- CMD...
    python -m lch.gpu_check record --dir LOGS --out DIR --probe "cuda TORCH CUDA DEVICE" ...

``step`` prints the step's line (``gpu_check: PASS|FAIL|SKIP NAME (Ns) ...``), appends the
step's outcome to ``LOGS/steps.jsonl`` and exits 0 (PASS), 1 (FAIL) or 3 (SKIP). The three
outcomes are never confused (docs/design.md): a step that ran no test, or could not run what
it checks (vLLM missing), is a SKIP, never a PASS; a step that passed without checking what
it claims (no CUDA world, no delay, a simulated device where the claim is real streams, a
required test that did not run) is a FAIL, as a broken check is.

``record`` writes ``DIR/gpu/gpu-check-<device>.json`` (``lch.records``, schema lch-result/1,
kind ``gpu``) and ``DIR/gpu_check-steps.log``: every step's log, the hunt's report and every
reproducer a step wrote, one file (what comes back from a lent machine is a few files).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shlex
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from attrs import frozen

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
EXIT = {PASS: 0, FAIL: 1, SKIP: 3}
KIND = "gpu"
# What a lent machine sends back is limited; each step's log is cut to its end past this.
LOG_BYTES = 2 * 1024 * 1024
# Packages whose versions decide what a step did (Hypothesis draws the derandomized programs
# the catalogue's budgets were measured with; torch and triton run the copies).
PACKAGES = ("torch", "triton", "numpy", "hypothesis", "pytest", "pytest-xdist", "attrs",
            "vllm", "msgspec", "pyzmq")
# Written by tools/gpu_carry.sh: the commit the carried tree was built at, for a record made
# where the tree travelled without its git directory.
CARRIED_COMMIT = ".whl/harness-commit.txt"
# The simulated device's own events (sim/sim_device.py): a CUDA hunt never reaches them.
SIM_DEVICE_EVENTS = ("copy ran out of order", "read while a copy was pending")


# -- what each step must show -----------------------------------------------------------------

@frozen
class Need:
    """A condition on one test's tally (``lch/gpu_check_plugin.py``), named for the record."""

    what: str
    holds: Callable[[dict], bool]


def _count(tally: dict, group: str, prefix: str = "") -> int:
    return sum(n for key, n in (tally.get(group) or {}).items() if key.startswith(prefix))


CUDA_ONLY = Need("every offload world on CUDA", lambda t: _count(t, "offload_data", "cuda/") > 0
                 and _count(t, "offload_data") == _count(t, "offload_data", "cuda/"))
ASYNC_ON_CUDA = Need("async worlds on CUDA", lambda t: _count(t, "offload_data", "cuda/async") > 0)
SYNC_ON_CUDA = Need("sync worlds on CUDA", lambda t: _count(t, "offload_data", "cuda/sync") > 0)
REAL_STREAMS = Need("real CUDA streams, never the simulated device",
                    lambda t: _count(t, "streams", "CudaStreams") > 0
                    and _count(t, "streams", "SimStreams") == 0)
DELAYS = Need("side-stream delays queued (torch.cuda._sleep)",
              lambda t: (t.get("cuda_sleeps") or 0) > 0)
COPY_PATHS = Need("vLLM's copy paths recorded", lambda t: bool(t.get("vllm_copy_paths")))


@frozen
class Step:
    name: str
    shows: str
    tests: tuple[str, ...] = ()       # node ids that must each pass
    needs: tuple[Need, ...] = ()      # of each of those tests' tallies
    kind: str = "pytest"


KNOWN_BUGS = "properties/test_known_bugs.py::"
RACE_SWITCHES = ("offload-race-read-before-load", "offload-race-slot-reuse",
                 "offload-race-dbuf-overwrite")
STEPS = {s.name: s for s in (
    Step("offload-native",
         "the native offload machine's sync and async worlds on CUDA (LCH_DEVICE=cuda), each "
         "async run with its drawn side-stream delays, against the model",
         tests=("properties/test_offload_engine.py::test_offload_engine_machine[native]",),
         needs=(CUDA_ONLY, SYNC_ON_CUDA, ASYNC_ON_CUDA, REAL_STREAMS, DELAYS)),
    Step("race-switches",
         "each offload-race-* switch (one missing event wait) caught on real CUDA streams "
         "through the drawn delays alone, minimized within its bound, and its reproducer "
         "failing on the bug and passing on native",
         tests=tuple(f"{KNOWN_BUGS}test_known_bug_is_caught_and_shrunk[{b}]"
                     for b in RACE_SWITCHES),
         needs=(CUDA_ONLY, ASYNC_ON_CUDA, REAL_STREAMS, DELAYS)),
    Step("waits-intact",
         "the waits hold with delays on: with no bug switched on, the native engine passes "
         "the catalogue's largest offload budget on CUDA with side-stream delays "
         "(test_switch_off_passes_with_the_same_budget[offload_engine])",
         tests=(f"{KNOWN_BUGS}test_switch_off_passes_with_the_same_budget[offload_engine]",),
         needs=(CUDA_ONLY, ASYNC_ON_CUDA, REAL_STREAMS, DELAYS)),
    Step("vllm-offload-worker",
         "vLLM's real CPUOffloadingWorker on CUDA round-trips bytes and reports each job "
         "finished once, single-block and batched jobs; the copy paths that ran are recorded",
         tests=("properties/test_offload_worker.py::"
                "test_offload_worker_round_trips_bytes_and_finishes_jobs_once[vllm]",
                "properties/test_offload_worker.py::test_batched_jobs_round_trip_bytes[vllm]"),
         needs=(COPY_PATHS,)),
    Step("hunt", "a time-budgeted hunt of the offload engine on CUDA (native target)",
         kind="hunt"),
)}


# -- reading what a step left -----------------------------------------------------------------

SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


def pytest_counts(log: str) -> dict:
    """Counts from pytest's closing line (the last line that has any)."""
    for line in reversed(log.splitlines()):
        found = SUMMARY.findall(line)
        if found and (" in " in line or "no tests ran" in line):
            counts = {word.rstrip("s") if word.startswith("error") else word: int(n)
                      for n, word in found}
            return counts
    return {}


def read_lines(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    lines = []
    for text in path.read_text().splitlines():
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            continue            # a line cut by a kill at the time box
    return lines


def tally_of(test: dict) -> dict:
    return {**(test.get("gpu_check_tally") or {}),
            **{k: v for k, v in test.items() if k.startswith("vllm_")}}


def judge_pytest(step: Step, rc: int, log: str, tests: list[dict],
                 outcomes: list[dict]) -> tuple[str, str]:
    counts = pytest_counts(log)
    said = ", ".join(f"{n} {w}" for w, n in counts.items()) or "no pytest summary"
    failed = [t for t in tests if t["outcome"] == "failed"]
    if rc == 5:
        return FAIL, (f"{said}: the step's selection names no test here (pytest exit 5); fix "
                      "its arguments in tools/gpu_check.sh")
    if rc == 1 or failed:
        divergences = [o for o in outcomes if o.get("outcome") == "divergence"]
        first = (f"divergence {divergences[0].get('property')} in {divergences[0]['nodeid']} "
                 f"({divergences[0].get('calls')} calls, reproducer "
                 f"{divergences[0].get('reproducer')})" if divergences else
                 f"{failed[0]['nodeid']}: {failed[0].get('message', '')}" if failed else "")
        return FAIL, f"{said}: {first}".rstrip(": ").splitlines()[0]
    if rc != 0:
        return FAIL, (f"{said}: pytest exited {rc} (2 interrupted or a collection error, "
                      "3 internal error, 4 usage error): see the step's log")
    if not tests:
        return FAIL, (f"{said}: no test line from lch/gpu_check_plugin.py, so what ran cannot "
                      "be told; check that `-p lch.gpu_check_plugin` loads")
    by_id = {t["nodeid"]: t for t in tests}
    passed = [t for t in tests if t["outcome"] == "passed"]
    if not step.tests and not passed:
        return SKIP, f"{said}: ran no test: {_skip_reasons(tests)}"
    absent = [n for n in step.tests if n not in by_id]
    if absent:
        return FAIL, (f"{said}: required tests did not run: {', '.join(absent)}; fix the "
                      "step's selection in tools/gpu_check.sh or its STEPS entry here")
    skipped = [by_id[n] for n in step.tests if by_id[n]["outcome"] != "passed"]
    if skipped:
        return SKIP, (f"{said}: {len(skipped)} of {len(step.tests)} required tests could not "
                      f"run: {_skip_reasons(skipped)}")
    unmet = []
    for need in step.needs:
        short = [n.split("::")[-1] for n in step.tests if not need.holds(tally_of(by_id[n]))]
        if short:
            unmet.append(need.what + ("" if len(short) == len(step.tests)
                                      else f" (in {', '.join(short)})"))
    if unmet:
        return FAIL, (f"{said}, but the step did not check what it claims; not shown: "
                      f"{'; '.join(unmet)} (the tests' tallies are in the record)")
    ran = copy_paths_line([by_id[n] for n in step.tests])
    return PASS, f"{said}; copy paths: {ran}" if ran else said


def copy_paths_line(tests: list[dict]) -> str:
    """``store (gpu->cpu): torch stand-in x120; load (cpu->gpu): vLLM's Triton kernel x18, ...``
    over the tests' recorded vLLM copy paths (``sim/vllm/offload_worker.py``)."""
    merged: dict = {}
    for test in tests:
        for handler, seen in (test.get("vllm_copy_paths") or {}).items():
            entry = merged.setdefault(handler, {"direction": seen.get("direction"), "ran": {}})
            for path, n in (seen.get("ran") or {}).items():
                entry["ran"][path] = entry["ran"].get(path, 0) + n
    return "; ".join(
        f"{handler} ({entry['direction']}): "
        + (", ".join(f"{path.split(' (')[0]} x{n}" for path, n in sorted(entry["ran"].items()))
           or "nothing ran")
        for handler, entry in merged.items())


def _skip_reasons(tests: list[dict]) -> str:
    reasons = sorted({t["message"].splitlines()[0].removeprefix("Skipped: ")
                      for t in tests if t.get("message")})
    return " | ".join(reasons) or "no reason given"


def judge_hunt(rc: int, report: dict | None) -> tuple[str, str]:
    pairs = (report or {}).get("pairs") or []
    examples = sum(p.get("examples") or 0 for p in pairs)
    steps = sum(p.get("steps") or 0 for p in pairs)
    said = f"{examples} examples, {steps} steps"
    findings = [f for p in pairs for f in (p.get("findings") or [])]
    if rc == 1 or findings:
        first = findings[0] if findings else {}
        return FAIL, (f"{said}: divergence {first.get('id', '?')} ({first.get('calls')} "
                      f"calls, reproducer {first.get('reproducer')})")
    if rc == 2:
        return FAIL, f"{said}: the hunt refused its input (exit 2): see the step's log"
    if rc == 3 or (rc == 0 and not examples):
        why = "; ".join(f"{p['subsystem']} x {p['target']}: {p.get('result')} {p.get('why', '')}"
                        for p in pairs) or "no report"
        return SKIP, f"{said}: ran no example or could not run (exit {rc}): {why}"
    if rc != 0 or report is None:
        return FAIL, f"{said}: the hunt exited {rc}" + ("" if report else " with no report")
    simulated = {e: n for p in pairs for e, n in (p.get("events") or {}).items()
                 if e in SIM_DEVICE_EVENTS}
    if simulated:
        return FAIL, (f"{said}, but on the simulated device ({simulated}), not CUDA: check "
                      "LCH_DEVICE=cuda reaches the hunt's workers")
    return PASS, f"{said}, no failure"


def judge(name: str, logs: Path, rc: int, limit: int) -> dict:
    step = STEPS.get(name)
    if step is None:
        raise SystemExit(f"gpu_check: unknown step {name!r}; known: {', '.join(STEPS)}; add it "
                         "to STEPS in lch/gpu_check.py")
    log_path = logs / f"{name}.log"
    log = log_path.read_text(errors="replace") if log_path.is_file() else ""
    tests = read_lines(logs / f"{name}.tests.jsonl")
    outcomes = read_lines(logs / f"{name}.outcomes.jsonl")
    report = None
    report_path = logs / name / "hunt-report.json"
    if report_path.is_file():
        try:
            report = json.loads(report_path.read_text())
        except json.JSONDecodeError:
            report = None
    if rc in (124, 137):
        outcome, detail = FAIL, f"timed out after {limit}s"
    elif step.kind == "hunt":
        outcome, detail = judge_hunt(rc, report)
    else:
        outcome, detail = judge_pytest(step, rc, log, tests, outcomes)
    result = {"step": name, "outcome": outcome, "detail": detail, "shows": step.shows,
              "exit": rc, "limit_s": limit}
    if step.kind == "pytest":
        result["counts"] = pytest_counts(log)
        result["tests"] = [_test_item(t) for t in tests]
        divergences = [{k: o.get(k) for k in ("nodeid", "property", "calls", "reproducer",
                                              "trace", "message")}
                       for o in outcomes if o.get("outcome") == "divergence"]
        if divergences:
            result["divergences"] = divergences
    elif report is not None:
        result["hunt"] = _hunt_item(report)
    return result


def _test_item(test: dict) -> dict:
    item = {"test": test["nodeid"], "outcome": test["outcome"], "seconds": test["duration_s"]}
    tally = tally_of(test)
    if tally:
        item["ran_on"] = tally
    if test.get("message") and test["outcome"] != "passed":
        item["message"] = test["message"][:2000]
    return item


def _hunt_item(report: dict) -> dict:
    return {"seed": report.get("seed"), "budget_s": report.get("budget_s"),
            "elapsed_s": report.get("elapsed_s"),
            "pairs": [{k: p.get(k) for k in ("subsystem", "target", "result", "why", "examples",
                                             "steps", "steps_per_s", "events", "findings")}
                      for p in report.get("pairs") or []]}


# -- the record -------------------------------------------------------------------------------

def packages() -> dict:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def vllm_under_test() -> dict | None:
    """The vLLM the worker step imported: release, and whether its compiled ops were there
    (never imported here: that takes seconds and may fail)."""
    try:
        dist = metadata.distribution("vllm")
    except metadata.PackageNotFoundError:
        return None
    folder = Path(str(dist.locate_file("vllm")))
    compiled = sorted(p.name for p in folder.glob("*.so")) if folder.is_dir() else []
    return {"version": dist.version, "path": str(folder),
            "compiled": compiled or "none: vLLM's Python files only"}


def device_name_slug(device: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower().replace("nvidia", "")).strip("-")
    return slug or "unknown"


def delays_summary(steps: list[dict]) -> dict:
    from properties.offload_engine_worlds import DELAY_CYCLES
    sleeps, by_cycles = 0, {}
    for step in steps:
        for test in step.get("tests") or []:
            tally = test.get("ran_on") or {}
            sleeps += tally.get("cuda_sleeps") or 0
            for cycles, n in (tally.get("sleep_cycles") or {}).items():
                by_cycles[cycles] = by_cycles.get(cycles, 0) + n
    return {"drawn_from_cycles": list(DELAY_CYCLES),
            "drawn": "per async run and side stream (load, store): sleep before each copy",
            "sleeps_queued": sleeps,
            "sleeps_by_cycles": dict(sorted(by_cycles.items(), key=lambda kv: int(kv[0])))}


def copy_paths_summary(steps: list[dict]) -> dict:
    paths: dict = {}
    for step in steps:
        for test in step.get("tests") or []:
            ran_on = test.get("ran_on") or {}
            if ran_on.get("vllm_copy_paths"):
                paths[test["test"].split("::")[-1]] = {
                    "extension": ran_on.get("vllm_extension"),
                    "copy_op": ran_on.get("vllm_copy_op"),
                    "handlers": ran_on["vllm_copy_paths"]}
    return paths


def overall(steps: list[dict], probe_outcome: str) -> str:
    if probe_outcome != PASS:
        return probe_outcome
    outcomes = {s["outcome"] for s in steps}
    if FAIL in outcomes:
        return FAIL
    if SKIP in outcomes or not steps:
        return SKIP
    return PASS


def build_record(logs: Path, probe: list[str], probe_outcome: str, probe_detail: str,
                 command: str, started: str, wall_s: float) -> dict:
    from lch import records
    steps = read_lines(logs / "steps.jsonl")
    cuda = probe[:1] == ["cuda"]
    device = probe[3].replace("_", " ") if cuda and len(probe) > 3 else "no CUDA device"
    harness = records.harness_commit()
    carried = records.ROOT / CARRIED_COMMIT
    summary = {
        "outcome": overall(steps, probe_outcome),
        "probe": {"outcome": probe_outcome, "detail": probe_detail},
        "device": device,
        "torch": probe[1] if len(probe) > 1 else None,
        "cuda": probe[2] if len(probe) > 2 else None,
        "packages": packages(),
        "steps": {s["step"]: s["outcome"] for s in steps},
        "delays": delays_summary(steps),
        "vllm_copy_paths": copy_paths_summary(steps),
    }
    record = records.envelope(
        KIND, f"gpu-check-{device_name_slug(device)}", command, vllm=vllm_under_test(),
        wall_s=wall_s, summary=summary, items=steps, started=started)
    if carried.is_file():
        record["harness"] = carried_commit(carried.read_text())
    elif harness.get("commit") is None:
        record["harness"] = {"commit": None, "dirty": None}
    return record


def carried_commit(text: str) -> dict:
    """The harness commit a tree carried to a lent machine was built at, from the file
    ``tools/gpu_carry.sh`` wrote just before it travelled. It wins over git's answer there:
    the machine may hold a ``.git`` that is not this checkout's (the first H200 runs found
    the session's starting commit in one, and took their tree for a dirty copy of it)."""
    lines = dict(line.split(" ", 1) for line in text.strip().splitlines() if " " in line)
    changed = lines.get("uncommitted", "").split(" ", 2)
    dirty = None
    if changed[:2] == ["changes", "to"] and len(changed) > 2:
        dirty = changed[2].split(" ", 1)[0] != "0"
    return {"commit": lines.get("commit"), "dirty": dirty, "carried": text.strip()}


def combined_log(logs: Path, steps: list[dict]) -> str:
    """Every step's log (its end, past ``LOG_BYTES``), then the hunt's report and every
    reproducer a step wrote."""
    parts = []
    for step in steps:
        path = logs / f"{step['step']}.log"
        text = path.read_text(errors="replace") if path.is_file() else "(no log)"
        if len(text) > LOG_BYTES:
            text = f"... (cut to its last {LOG_BYTES} bytes)\n" + text[-LOG_BYTES:]
        parts.append(f"===== {step['step']}: {step['outcome']} {step['detail']}\n"
                     f"===== command: {step.get('command', '?')}\n{text}")
    extra = sorted(logs.glob("*/hunt-report.md")) + sorted(logs.glob("**/test_*.py"))
    for path in extra:
        parts.append(f"===== {path.relative_to(logs)}\n{path.read_text(errors='replace')}")
    return "\n".join(parts)


# -- command line -----------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lch.gpu_check",
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    step = sub.add_parser("step", help="judge one step: print its line, append its outcome")
    step.add_argument("name")
    step.add_argument("--dir", required=True, type=Path)
    step.add_argument("--rc", required=True, type=int)
    step.add_argument("--seconds", required=True, type=int)
    step.add_argument("--limit", required=True, type=int)
    rec = sub.add_parser("record", help="write the record and the combined log")
    rec.add_argument("--dir", required=True, type=Path)
    rec.add_argument("--out", required=True, type=Path)
    rec.add_argument("--probe", default="")
    rec.add_argument("--probe-outcome", default=PASS, choices=(PASS, FAIL, SKIP))
    rec.add_argument("--probe-detail", default="")
    rec.add_argument("--command", default="tools/gpu_check.sh")
    rec.add_argument("--started", default=None)
    rec.add_argument("--wall", type=float, default=0.0)
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []    # the step's command
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)

    if args.verb == "step":
        result = judge(args.name, args.dir, args.rc, args.limit)
        result["seconds"] = args.seconds
        result["command"] = shlex.join(command)
        with open(args.dir / "steps.jsonl", "a") as handle:
            handle.write(json.dumps(result, sort_keys=True) + "\n")
        if args.rc in (124, 137):
            line = f"gpu_check: FAIL {args.name}: {result['detail']} (log {args.name}.log)"
        elif result["outcome"] == FAIL:
            line = (f"gpu_check: FAIL {args.name} (exit {args.rc}, {args.seconds}s) "
                    f"{result['detail']} (log {args.name}.log)")
        else:
            line = f"gpu_check: {result['outcome']} {args.name} ({args.seconds}s) " \
                   f"{result['detail']}"
        print(line, flush=True)
        return EXIT[result["outcome"]]

    from lch import records
    started = args.started or datetime.datetime.now(datetime.timezone.utc).isoformat()
    record = build_record(args.dir, args.probe.split(), args.probe_outcome, args.probe_detail,
                          args.command, started, args.wall)
    args.out.mkdir(parents=True, exist_ok=True)
    path = records.write(record, args.out)
    log = args.out / "gpu_check-steps.log"
    log.write_text(combined_log(args.dir, record["items"]))
    print(f"gpu_check: record {path} ({record['summary']['outcome']}), step logs {log}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
