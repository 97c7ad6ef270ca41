"""``history``: every subsystem's vllm suites over a list of vLLM releases, as a matrix.

    python -m lch.cli history --releases 0.10.2,0.14.0,0.33.0
    python -m lch.cli history --from 0.10.2 --to 0.33.0       # every final release between

Per release: its cached venv (``venvs.py``), one pytest run of the suites below with
``--target vllm`` and ``--outcomes`` (one JSON line per test), then one cell per subsystem:

- ``pass``: every test of the subsystem passed;
- ``divergence``: a property failed against the model (property, calls, reproducer);
- ``unavailable``: the adapter could not drive the release (which call, which error);
- ``absent``: the release does not have the class (e.g. KV offload before 0.11.0).

A cell is the worst of its tests (divergence, then unavailable, then pass); configurations a
release lacks (secondary tiers before 0.22.0) are notes on a passing cell. The matrix goes to
``history-report.md`` and ``history-report.json`` with install and suite times; reproducers
go under ``--reproducer-dir``/vllm-X. Exit status 1 when any cell is a divergence or
unavailable.

A suite stops at a subsystem's first divergence, so history then *hunts* every subsystem it
can drive (by default; ``--hunt-budget 2m`` per cell, default ``DEFAULT_HUNT_BUDGET``, or
``--hunt-examples N`` for a hunt fixed by count, ``--no-hunt`` for the suites alone): in the
release's venv, ``hunt --target vllm --subsystem S --seed 0 --no-db``. The hunt goes on past
every divergence it accepts (``lch/hunt.py``), so a cell lists every divergence found, one
finding group per cause (``properties/findings.py``: its signature, its examples, its
smallest reproducer); the suite's divergences join the same groups by finding id, or where
two machines of a column meet one cause (their ids carry their names), by property and
signature.

Each cell also says which of the upstream-fixed bugs the harness knows
(``fixtures/upstream_bugs.py``) affect the release and which of them its groups found
(``recall``). The report and the result record (``--record-dir``, default ``results``:
``results/history/<name>.json``) are rewritten as each cell completes, so a run killed in
release 3 keeps releases 1 and 2, and the release under way up to its last cell; a crash
while running a release is that release's error, and the next release runs.

The history process itself imports neither torch nor vLLM (``nox -s history`` runs it from a
venv with the test packages only); everything that needs them runs in the release's venv.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from attrs import asdict, define, field

from fixtures.upstream_bugs import recall
from lch import venvs
from sim.errors import HarnessError
from sim.files import atomic_write, check_writable
from sim.manifests import Column, Subsystem, all_manifests

DEFAULT_HUNT_BUDGET = "2m"


def history_columns(manifests: tuple[Subsystem, ...]) -> tuple[Column, ...]:
    """The matrix's columns, as each subsystem's manifest declares them (``history``), by
    rank; a column is hunted only where its manifest says so."""
    return tuple(column for m in manifests for column in m.history)


# Test module -> the matrix column it reports to; the columns; the columns history hunts
# (each a subsystem a hunt can drive).
COLUMN_LIST = history_columns(all_manifests())
SUITES = {suite: column.name for column in COLUMN_LIST for suite in column.suites}
COLUMNS = tuple(column.name for column in COLUMN_LIST)
HUNT_SCOPES = {column.name: column.hunt_scope() for column in COLUMN_LIST if column.hunted}
HUNTED = tuple(HUNT_SCOPES)
RANK = {"divergence": 3, "unavailable": 2, "pass": 1, "absent": 0}


def _same_cause(group: dict, found: dict) -> bool:
    """One cause: the same finding id, or (two machines of the column, whose ids carry
    their names) the same property and signature, or a scenario's check (which compares a
    value it was handed, so its signature names no call) and a machine's of the same
    property whose difference has the same shape (vLLM 0.27.0's first-in first-out reuse:
    a scenario's free queue and the machine's, out of order alike)."""
    if found.get("id") and group.get("id") == found["id"]:
        return True
    if group.get("property") != found.get("property") or not found.get("signature") \
            or not group.get("signature"):
        return False
    if group["signature"] == found["signature"]:
        return True
    from properties.signatures import split_shape
    ours, theirs = split_shape(group["signature"]), split_shape(found["signature"])
    return ours is not None and theirs is not None and ours[1] == theirs[1] \
        and "" in (ours[0], theirs[0])


@define
class Cell:
    outcome: str = "absent"
    divergences: list[dict] = field(factory=list)   # property, calls, trace, reproducer, test
    unavailable: list[str] = field(factory=list)    # "test: call and error"
    notes: list[str] = field(factory=list)          # configurations the release lacks
    # Classes and configurations the release has that the harness cannot drive yet
    # ("unavailable: ..." from ``NotDriven``): shown in the matrix, never as absent.
    not_driven: list[str] = field(factory=list)
    tests: int = 0
    hunt: dict | None = None        # examples, seconds, result, what was adopted going on

    def add(self, record: dict) -> None:
        kind = record["outcome"]
        if kind == "skipped":
            return
        self.tests += 1
        if RANK[kind] > RANK[self.outcome]:
            self.outcome = kind
        test = record["nodeid"].split("::", 1)[-1]
        if kind == "divergence":
            found = {k: record.get(k) for k in ("property", "calls", "trace", "reproducer",
                                                "message", "outside_vllm")} | {
                "test": test, "id": _finding_in(record.get("reproducer")), "seen": 1}
            found["signature"] = _signature(found)
            same = next((d for d in self.divergences if _same_cause(d, found)), None)
            if same is not None:        # another test met the same cause: one group
                same.setdefault("tests", [same["test"]]).append(test)
                same["seen"] = same.get("seen", 1) + 1
                if found["calls"] and not same.get("calls"):   # a machine's program shows it
                    same.update({k: found[k] for k in ("calls", "trace", "reproducer",
                                                       "message", "id", "signature")})
            else:
                self.divergences.append(found)
        elif kind == "unavailable":
            self.unavailable.append(f"{test}: {record.get('message', '')}")
        elif kind == "absent":
            self.notes.append(record.get("message", ""))
        for note in record.get("missing", []):
            into = self.not_driven if note.startswith("unavailable: ") else self.notes
            if note not in into:
                into.append(note)

    def add_hunt(self, pair: dict) -> None:
        """A hunt's findings (its report's pair), each once: by finding id. A finding the
        suite also met joins its group (examples added; the smaller reproducer kept)."""
        by_id = {d.get("id"): d for d in self.divergences if d.get("id")}
        for found in pair.get("findings") or []:
            group = by_id.get(found["id"]) or next(
                (d for d in self.divergences if _same_cause(d, found)), None)
            if group is not None:
                group["seen"] = group.get("seen", 1) + found.get("seen", 1)
                if found.get("calls") and (group.get("calls") or 10**9) > found["calls"]:
                    group.update(calls=found["calls"], reproducer=found.get("reproducer"),
                                 smallest_from="hunt")
                continue
            self.outcome = "divergence"
            group = {k: found.get(k) for k in ("property", "calls", "reproducer", "message",
                                               "id", "signature", "seen", "programs",
                                               "went_past")} | {"test": "hunt", "trace": None}
            self.divergences.append(group)
            by_id[found["id"]] = group
        self.hunt = {"result": pair.get("result"), "examples": pair.get("examples"),
                     "seconds": pair.get("seconds"), "adopted": pair.get("adopted") or {}}

    def text(self) -> str:
        if self.outcome == "divergence":
            # A world vLLM does not build is labelled in the cell: not a finding against vLLM.
            shown = f"divergence ({len(self.divergences)}): " + ", ".join(
                (f"{d['property']} ({d['calls']} calls)" if d.get("calls")
                 else str(d["property"])) + (" [outside vLLM]" if d.get("outside_vllm") else "")
                for d in self.divergences)
        elif self.outcome == "unavailable":
            shown = f"unavailable ({len(self.unavailable)} tests)"
        else:
            shown = "pass*" if self.outcome == "pass" and self.notes else self.outcome
        if self.not_driven:
            names = sorted({n.split(": ")[1] for n in self.not_driven})
            shown += f"; unavailable: {', '.join(names)}"
        return shown


@define
class ReleaseRun:
    release: str
    install_s: float = 0.0
    fresh_install_s: float = 0.0
    cached: bool = False
    suite_s: float = 0.0
    hunt_s: float = 0.0          # the hunts, every cell
    cells: dict[str, Cell] = field(factory=dict)
    error: str | None = None     # the release could not be installed or run at all
    recall: list[dict] = field(factory=list)   # per known upstream bug: found or missed
    complete: bool = False       # every cell ran (a partial report shows the run under way)

    @property
    def failed(self) -> bool:
        return any(c.outcome in ("divergence", "unavailable") for c in self.cells.values())

    def state(self, column: str) -> str | None:
        """What bisect compares: the divergences' properties, ``pass``, or None (unknown)."""
        cell = self.cells.get(column)
        if cell is None or cell.outcome in ("unavailable", "absent"):
            return None
        if cell.outcome == "pass":
            return "pass"
        return ", ".join(sorted({str(d["property"]) for d in cell.divergences}))


def _finding_in(reproducer: str | None) -> str | None:
    """The finding id a reproducer file names (``FINDING = ...``), if it can be read."""
    if not reproducer:
        return None
    from properties.findings import parse_accept
    try:       # without importing the machines (they import torch; this venv has none)
        return parse_accept(reproducer, check=False)[0]
    except HarnessError:
        return None


def _signature(found: dict) -> str | None:
    """A suite divergence's signature, from its property and message (as a hunt names it)."""
    from properties.signatures import signature_text
    if not found.get("property") or not found.get("message"):
        return None
    return signature_text(found["property"], found["message"].splitlines()[0])


def hunt_cells(run: ReleaseRun, python: Path, found_dir: Path, budget: str | None,
               examples: int | None, written=lambda: None) -> None:
    """Per subsystem the release has (its cell neither absent nor unavailable), a hunt that
    goes on past every divergence; its findings join the cell. ``written`` is called after
    each cell (the report is rewritten as cells complete)."""
    for column in HUNTED:
        cell = run.cells.get(column)
        if cell is None or cell.outcome in ("absent", "unavailable"):
            continue
        out = found_dir / f"hunt-{column}"
        scope = ["--examples", str(examples)] if examples else ["--budget", budget]
        began = time.monotonic()
        try:
            subsystems = [arg for name in HUNT_SCOPES[column] for arg in ("--subsystem", name)]
            proc = subprocess.run([str(python), "-m", "lch.cli", "hunt", "--target", "vllm",
                                   *subsystems, *scope, "--seed", "0", "--no-db",
                                   "--report-dir", str(out), "--reproducer-dir", str(out)],
                                  cwd=venvs.ROOT, env=venvs.suite_env(HYPOTHESIS_PROFILE="hunt"),
                                  capture_output=True, text=True, check=False)
        finally:
            run.hunt_s += time.monotonic() - began
        out.mkdir(parents=True, exist_ok=True)
        (out / "hunt.log").write_text(proc.stdout + proc.stderr)
        report = out / "hunt-report.json"
        if proc.returncode in (0, 1, 3) and report.exists():
            for pair in json.loads(report.read_text())["pairs"]:
                cell.add_hunt(pair)
        else:
            cell.notes.append(f"hunt exited {proc.returncode}: see {out / 'hunt.log'}")
        run.recall = recall(run.release, groups_by_column(run))
        written()


def groups_by_column(run: ReleaseRun) -> dict[str, list[dict]]:
    """Each column's finding groups (a passing cell: none), for ``recall``."""
    return {c: list(cell.divergences) for c, cell in run.cells.items()
            if cell.outcome in ("pass", "divergence")}


def run_release(release: str, venv_dir: Path, out_dir: Path, pytest_args: list[str],
                suites: dict[str, str] | None = None, hunt_examples: int = 0,
                hunt_budget: str | None = None, written=lambda run: None) -> ReleaseRun:
    """Install (or reuse) ``release``'s venv, run the suites once (one cell per column),
    then hunt each cell (``hunt_budget`` or ``hunt_examples``; neither: no hunt).
    ``written(run)`` is called whenever a cell completes, with the run so far."""
    suites = suites or SUITES
    run = ReleaseRun(release)
    try:
        venv = venvs.ensure(release, venv_dir)
    except (HarnessError, subprocess.CalledProcessError) as error:
        return _broken(run, suites, f"install: {error}")
    run.install_s, run.fresh_install_s, run.cached = venv.install_s, venv.fresh_install_s, \
        venv.cached
    found_dir = (out_dir / f"vllm-{release}").resolve()
    found_dir.mkdir(parents=True, exist_ok=True)
    outcomes = found_dir / "outcomes.jsonl"
    outcomes.unlink(missing_ok=True)
    began = time.monotonic()
    proc = subprocess.run([str(venv.python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--target", "vllm", "--reproducer-dir", str(found_dir),
                           "--outcomes", str(outcomes), *sorted(set(suites)), *pytest_args],
                          cwd=venvs.ROOT, env=venvs.suite_env(), capture_output=True,
                          text=True, check=False)
    run.suite_s = time.monotonic() - began
    (found_dir / "pytest.log").write_text(proc.stdout + proc.stderr)
    records = [json.loads(line) for line in outcomes.read_text().splitlines()] \
        if outcomes.exists() else []
    if not records:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        return _broken(run, suites, f"pytest exited {proc.returncode}: {tail[0][:300]}")
    run.cells = {column: Cell() for column in dict.fromkeys(suites.values())}
    for record in records:
        column = suites.get(record["nodeid"].split("::", 1)[0])
        if column is not None:
            run.cells[column].add(record)
    run.recall = recall(release, groups_by_column(run))
    written(run)
    if hunt_examples or hunt_budget:
        try:
            hunt_cells(run, venv.python, found_dir, hunt_budget, hunt_examples,
                       lambda: written(run))
        except Exception as error:  # noqa: BLE001 - the suite's cells are kept
            run.error = f"hunts crashed: {error!r}"
            return run
    run.complete = True
    return run


def _broken(run: ReleaseRun, suites: dict[str, str], why: str) -> ReleaseRun:
    run.error = why
    run.cells = {c: Cell("unavailable", unavailable=[why]) for c in dict.fromkeys(suites.values())}
    return run


# -- the report ---------------------------------------------------------------------------------


def markdown(runs: list[ReleaseRun]) -> str:
    columns = [c for c in COLUMNS if any(c in r.cells for r in runs)]
    lines = ["# vLLM history: release x subsystem", "",
             "`pass*`: passed; some configurations absent from the release (notes below).", "",
             "| release | install (fresh) | suite | hunts | wall | " + " | ".join(columns)
             + " |", "|---|---|---|---|---|" + "---|" * len(columns)]
    for r in runs:
        install = f"{r.install_s:.0f} s" if not r.cached else f"cached ({r.fresh_install_s:.0f} s)"
        cells = [r.cells[c].text() if c in r.cells else "-" for c in columns]
        wall = r.install_s + r.suite_s + r.hunt_s
        under_way = "" if r.complete or r.error else " (under way)"
        lines.append(f"| {r.release}{under_way} | {install} | {r.suite_s:.0f} s | "
                     f"{r.hunt_s:.0f} s | {wall:.0f} s | " + " | ".join(cells) + " |")
    found = [(r, c, d) for r in runs for c in columns if c in r.cells
             for d in r.cells[c].divergences]
    if found:
        lines += ["", "## Divergences (one group per cause)", ""]
        for r, c, d in found:
            lines.append(f"- **{r.release} {c}**: `{d['property']}`"
                         + (f" in {d['calls']} calls" if d.get("calls") else "")
                         + (f", id `{d['id']}`" if d.get("id") else "")
                         + (f", met in {d['seen']} examples" if d.get("seen", 1) > 1 else "")
                         + (" (found by the hunt)" if d.get("test") == "hunt" else "")
                         + (f", reproducer `{d['reproducer']}`" if d.get("reproducer") else ""))
            if d.get("signature"):
                lines.append(f"  - signature: `{d['signature']}`")
            if d.get("outside_vllm"):
                lines.append("  - outside what vLLM builds: " + "; ".join(d["outside_vllm"])
                             + ": not a finding against vLLM")
            lines.append(f"  - {d.get('message') or ''}"[:400])
            for call in d.get("trace") or []:
                lines.append(f"  - `{call}`")
    adopted = [(r, c, f, what) for r in runs for c in columns if c in r.cells
               for f, what in ((r.cells[c].hunt or {}).get("adopted") or {}).items()]
    if adopted:
        lines += ["", "## Went on past (what each accepted finding's check adopted)", ""]
        lines += [f"- {r.release} {c}: `{f}`: {what}" for r, c, f, what in adopted]
    known = [(r, k) for r in runs for k in r.recall]
    if known:
        lines += ["", "## Known upstream bugs (fixtures/upstream_bugs.py): found or missed", ""]
        for r, k in known:
            state = ("found" + (f" (`{k['group']}`)" if k.get("group") else "")
                     if k["found"] else "MISSED" if k["found"] is False else k.get("why", "-"))
            lines.append(f"- {r.release} {k['column']}: {k['bug']}: {state}")
    lacking = [(r, c, why) for r in runs for c in columns if c in r.cells
               for why in r.cells[c].unavailable]
    if lacking:
        lines += ["", "## Unavailable (the adapter could not drive the release)", ""]
        lines += [f"- {r.release} {c}: {why}"[:600] for r, c, why in lacking]
    undriven = sorted({(r.release, c, n) for r in runs for c in columns if c in r.cells
                       for n in r.cells[c].not_driven})
    if undriven:
        lines += ["", "## Unavailable: the release has it, the harness cannot drive it yet", ""]
        lines += [f"- {v} {c}: {n.split(': ', 1)[1]}" for v, c, n in undriven]
    notes = sorted({(r.release, c, n) for r in runs for c in columns if c in r.cells
                    for n in r.cells[c].notes})
    if notes:
        lines += ["", "## Absent from the release (not run)", ""]
        lines += [f"- {v} {c}: {n}" for v, c, n in notes]
    return "\n".join(lines) + "\n"


def write_reports(runs: list[ReleaseRun], report_dir: Path, stem: str = "history-report") -> Path:
    report_dir.mkdir(parents=True, exist_ok=True)
    data = {"releases": [asdict(r) | {"failed": r.failed} for r in runs]}
    atomic_write(report_dir / f"{stem}.json", json.dumps(data, indent=1, sort_keys=True) + "\n")
    return atomic_write(report_dir / f"{stem}.md", markdown(runs))


def pytest_args(args) -> list[str]:
    """What follows ``--`` on the command line, for pytest."""
    rest = list(args.pytest_args or [])
    return rest[1:] if rest[:1] == ["--"] else rest


def history_record(name: str, runs: list[ReleaseRun], command: str, wall_s: float,
                   started: str, budget: str) -> dict:
    """The result record of a history run: per cell its outcome, finding groups (with
    signatures), the known bugs it found and missed, and seconds (``lch/records.py``)."""
    from lch.records import envelope
    items, releases = [], []
    for r in runs:
        for column, cell in r.cells.items():
            known = [k for k in r.recall if k["column"] == column]
            items.append({
                "release": r.release, "column": column, "outcome": cell.outcome,
                "groups": [{k: d.get(k) for k in ("id", "property", "signature", "calls",
                                                   "seen", "test", "reproducer")}
                           | ({"outside_vllm": d["outside_vllm"]} if d.get("outside_vllm")
                              else {})
                           for d in cell.divergences],
                "known_found": [k["bug"] for k in known if k["found"]],
                "known_missed": [k["bug"] for k in known if k["found"] is False],
                "hunt": cell.hunt, "unavailable": cell.unavailable,
                "not_driven": cell.not_driven, "absent_notes": cell.notes})
        releases.append({
            "release": r.release, "complete": r.complete, "error": r.error,
            "suite_s": round(r.suite_s, 1), "hunt_s": round(r.hunt_s, 1),
            "install_s": round(r.install_s, 1),
            "known": sum(k["found"] is not None for k in r.recall),
            "found": sum(bool(k["found"]) for k in r.recall),
            "missed": [k["bug"] for k in r.recall if k["found"] is False]})
    return envelope("history", name, command, vllm=None, wall_s=wall_s, started=started,
                    summary={"releases": releases, "hunt_budget": budget}, items=items)


def main(args) -> int:
    import shlex
    import sys

    from lch import records
    releases = venvs.parse_releases(args.releases) if args.releases \
        else venvs.releases_between(args.first, args.last)
    # ``--subsystem``: only those columns' suites run, and only their cells are recorded (a
    # pytest ``-k`` would leave the other columns with no tests, shown as absent).
    unknown = sorted(set(args.subsystem or ()) - set(COLUMNS))
    if unknown:
        raise HarnessError(f"--subsystem {', '.join(unknown)}: not a history column; give "
                           f"one of {', '.join(COLUMNS)}")
    suites = {path: column for path, column in SUITES.items()
              if not args.subsystem or column in args.subsystem}
    check_writable(args.report_dir, "--report-dir")       # before the first install
    check_writable(args.reproducer_dir, "--reproducer-dir")
    if args.record_dir:
        check_writable(args.record_dir, "--record-dir")
    from lch.cli import parse_budget
    if args.hunt_budget:
        parse_budget(args.hunt_budget)                      # a bad one stops here
    budget = None if args.no_hunt or args.hunt_examples else \
        (args.hunt_budget or DEFAULT_HUNT_BUDGET)
    print(f"history over {len(releases)} release(s): {', '.join(releases)}; hunts: "
          + (f"{args.hunt_examples} examples per cell" if args.hunt_examples else
             "none" if budget is None else f"{budget} per cell"), flush=True)
    command = "python -m lch.cli " + " ".join(map(shlex.quote, sys.argv[1:]))
    started, began = records.now(), time.monotonic()
    runs: list[ReleaseRun] = []

    def written(run: ReleaseRun | None = None) -> None:
        """Reports and record as they stand: the finished releases and the one under way."""
        shown = runs + ([run] if run is not None and run not in runs else [])
        write_reports(shown, Path(args.report_dir))
        if args.record_dir:
            # A run of some columns is named for them: it never replaces a whole run's record.
            name = "-".join(releases + sorted(args.subsystem or ()))
            record = history_record(name, shown, command,
                                    time.monotonic() - began, started,
                                    budget or f"{args.hunt_examples} examples")
            records.write(record, args.record_dir)

    for release in releases:
        print(f"vllm {release}: installing (or reusing) and running ...", flush=True)
        try:
            run = run_release(release, Path(args.venv_dir), Path(args.reproducer_dir),
                              pytest_args(args), suites=suites,
                              hunt_examples=args.hunt_examples, hunt_budget=budget,
                              written=written)
        except Exception as error:  # noqa: BLE001 - one release's crash is its own error
            run = _broken(ReleaseRun(release), suites, f"history crashed: {error!r}")
        runs.append(run)
        cells = ", ".join(f"{c}: {cell.text()}" for c, cell in run.cells.items())
        print(f"  {release}: install {run.install_s:.0f} s, suite {run.suite_s:.0f} s, "
              f"hunts {run.hunt_s:.0f} s; {cells}", flush=True)
        written()
    path = write_reports(runs, Path(args.report_dir))
    print(path.read_text())
    return 1 if any(r.failed for r in runs) else 0
