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

A suite stops at a subsystem's first divergence. ``--hunt-examples N`` (off by default: the
default history stays as fast) then runs, for each cell that diverged, a hunt past the first
bug in the same venv (``hunt --target vllm --subsystem S --examples N --seed 0 --no-db``),
and the cell lists every divergence it found, each with its finding id (the suite's
reproducers carry theirs, so a bug both found is listed once).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from attrs import asdict, define, field

from lch import venvs
from sim.errors import HarnessError
from sim.files import atomic_write, check_writable

# Test module -> the matrix column it reports to. The adapter tests of test_vllm_target.py
# drive the encoder cache.
SUITES = {
    "properties/test_encoder_cache.py": "encoder_cache",
    "properties/test_vllm_target.py": "encoder_cache",
    "properties/test_encoder_decoder_cache.py": "encoder_decoder_cache",
    "properties/test_scheduler_pass.py": "scheduler_pass",
    "properties/test_tiered_lookup.py": "tiered_lookup",
    "properties/test_tiered_lookup_vllm_scans.py": "connector_scans",
    "properties/test_prefix_cache.py": "prefix_cache",
    "properties/test_prefix_cache_scenarios.py": "prefix_cache",
}
COLUMNS = ("encoder_cache", "encoder_decoder_cache", "scheduler_pass", "tiered_lookup",
           "connector_scans", "prefix_cache")
HUNTED = ("encoder_cache", "scheduler_pass", "tiered_lookup")   # columns that are subsystems
RANK = {"divergence": 3, "unavailable": 2, "pass": 1, "absent": 0}


@define
class Cell:
    outcome: str = "absent"
    divergences: list[dict] = field(factory=list)   # property, calls, trace, reproducer, test
    unavailable: list[str] = field(factory=list)    # "test: call and error"
    notes: list[str] = field(factory=list)          # configurations the release lacks
    tests: int = 0

    def add(self, record: dict) -> None:
        kind = record["outcome"]
        if kind == "skipped":
            return
        self.tests += 1
        if RANK[kind] > RANK[self.outcome]:
            self.outcome = kind
        test = record["nodeid"].split("::", 1)[-1]
        if kind == "divergence":
            self.divergences.append({k: record.get(k) for k in
                                     ("property", "calls", "trace", "reproducer", "message")}
                                    | {"test": test, "id": _finding_in(record.get("reproducer"))})
        elif kind == "unavailable":
            self.unavailable.append(f"{test}: {record.get('message', '')}")
        elif kind == "absent":
            self.notes.append(record.get("message", ""))
        for note in record.get("missing", []):
            if note not in self.notes:
                self.notes.append(note)

    def add_hunt(self, pair: dict) -> None:
        """A hunt's findings (its report's pair), each once: by finding id."""
        known = {d.get("id") for d in self.divergences} - {None}
        for found in pair.get("findings") or []:
            if found["id"] not in known:
                known.add(found["id"])
                self.outcome = "divergence"
                self.divergences.append({k: found.get(k) for k in
                                         ("property", "calls", "reproducer", "message", "id")}
                                        | {"test": "hunt", "trace": None})

    def text(self) -> str:
        if self.outcome == "divergence":
            return "divergence: " + ", ".join(
                f"{d['property']} ({d['calls']} calls)" if d.get("calls")
                else str(d["property"]) for d in self.divergences)
        if self.outcome == "unavailable":
            return f"unavailable ({len(self.unavailable)} tests)"
        if self.outcome == "pass" and self.notes:
            return "pass*"
        return self.outcome


@define
class ReleaseRun:
    release: str
    install_s: float = 0.0
    fresh_install_s: float = 0.0
    cached: bool = False
    suite_s: float = 0.0
    hunt_s: float = 0.0          # --hunt-examples: the hunts past each first bug
    cells: dict[str, Cell] = field(factory=dict)
    error: str | None = None     # the release could not be installed or run at all

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
    try:
        return parse_accept(reproducer)[0]
    except HarnessError:
        return None


def hunt_past_first(run: ReleaseRun, python: Path, found_dir: Path, examples: int) -> None:
    """Per diverged subsystem, a hunt past the first bug; its findings join the cell."""
    for column in HUNTED:
        cell = run.cells.get(column)
        if cell is None or cell.outcome != "divergence":
            continue
        out = found_dir / f"hunt-{column}"
        began = time.monotonic()
        proc = subprocess.run([str(python), "-m", "lch.cli", "hunt", "--target", "vllm",
                               "--subsystem", column, "--examples", str(examples),
                               "--seed", "0", "--no-db", "--report-dir", str(out),
                               "--reproducer-dir", str(out)],
                              cwd=venvs.ROOT, env=venvs.suite_env(), capture_output=True,
                              text=True, check=False)
        run.hunt_s += time.monotonic() - began
        out.mkdir(parents=True, exist_ok=True)
        (out / "hunt.log").write_text(proc.stdout + proc.stderr)
        report = out / "hunt-report.json"
        if proc.returncode in (0, 1) and report.exists():
            for pair in json.loads(report.read_text())["pairs"]:
                cell.add_hunt(pair)
        else:
            cell.notes.append(f"hunt past the first bug exited {proc.returncode}: "
                              f"see {out / 'hunt.log'}")


def run_release(release: str, venv_dir: Path, out_dir: Path, pytest_args: list[str],
                suites: dict[str, str] | None = None, hunt_examples: int = 0) -> ReleaseRun:
    """Install (or reuse) ``release``'s venv and run the suites once; one cell per column."""
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
    if hunt_examples:
        hunt_past_first(run, venv.python, found_dir, hunt_examples)
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
             "| release | install (fresh) | suite | wall | " + " | ".join(columns) + " |",
             "|---|---|---|---|" + "---|" * len(columns)]
    for r in runs:
        install = f"{r.install_s:.0f} s" if not r.cached else f"cached ({r.fresh_install_s:.0f} s)"
        cells = [r.cells[c].text() if c in r.cells else "-" for c in columns]
        wall = r.install_s + r.suite_s + r.hunt_s
        lines.append(f"| {r.release} | {install} | {r.suite_s:.0f} s | {wall:.0f} s | "
                     + " | ".join(cells) + " |")
    found = [(r, c, d) for r in runs for c in columns if c in r.cells
             for d in r.cells[c].divergences]
    if found:
        lines += ["", "## Divergences", ""]
        for r, c, d in found:
            lines.append(f"- **{r.release} {c}**: `{d['property']}`"
                         + (f" in {d['calls']} calls" if d.get("calls") else "")
                         + (f", id `{d['id']}`" if d.get("id") else "")
                         + (" (hunt past the first bug)" if d.get("test") == "hunt" else "")
                         + (f", reproducer `{d['reproducer']}`" if d.get("reproducer") else ""))
            lines.append(f"  - {d.get('message') or ''}"[:400])
            for call in d.get("trace") or []:
                lines.append(f"  - `{call}`")
    lacking = [(r, c, why) for r in runs for c in columns if c in r.cells
               for why in r.cells[c].unavailable]
    if lacking:
        lines += ["", "## Unavailable (the adapter could not drive the release)", ""]
        lines += [f"- {r.release} {c}: {why}"[:600] for r, c, why in lacking]
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


def main(args) -> int:
    releases = venvs.parse_releases(args.releases) if args.releases \
        else venvs.releases_between(args.first, args.last)
    check_writable(args.report_dir, "--report-dir")       # before the first install
    check_writable(args.reproducer_dir, "--reproducer-dir")
    print(f"history over {len(releases)} release(s): {', '.join(releases)}", flush=True)
    runs = []
    for release in releases:
        print(f"vllm {release}: installing (or reusing) and running ...", flush=True)
        run = run_release(release, Path(args.venv_dir), Path(args.reproducer_dir),
                          pytest_args(args), hunt_examples=args.hunt_examples)
        runs.append(run)
        cells = ", ".join(f"{c}: {cell.text()}" for c, cell in run.cells.items())
        print(f"  {release}: install {run.install_s:.0f} s, suite {run.suite_s:.0f} s; {cells}",
              flush=True)
        write_reports(runs, Path(args.report_dir))       # a partial report survives a stop
    path = write_reports(runs, Path(args.report_dir))
    print(path.read_text())
    return 1 if any(r.failed for r in runs) else 0
