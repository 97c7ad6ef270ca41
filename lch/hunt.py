"""The hunt: run every (subsystem, target) pair's machine in rounds until the budget is spent.

Each round is one Hypothesis run of ``ROUND_EXAMPLES`` examples under the ``hunt`` profile,
seeded from one ``random.Random(master_seed)`` (printed by the CLI), so a hunt can be rerun.
A failure is minimized, written as a reproducer and reported; that pair then stops (its bug is
found) while the others go on. The report goes to ``hunt-report.md`` / ``hunt-report.json``.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from pathlib import Path

from attrs import define, field
from hypothesis import Phase, settings

from fixtures.profiles import example_database
from properties.explore import explore
from properties.harness import Recorder
from properties.machines import MACHINES, machine_for
from properties.reproducer import write_reproducer
from properties.run import run_machine
from sim.errors import HarnessError, TargetUnavailable

ROUND_EXAMPLES = 100


@define
class PairReport:
    subsystem: str
    target: str
    examples: int = 0
    steps: int = 0
    rounds: int = 0
    seconds: float = 0.0
    events: Counter = field(factory=Counter)
    failure: dict | None = None
    skipped: str | None = None


@define
class HuntReport:
    seed: int
    budget_s: float
    pairs: list[PairReport] = field(factory=list)

    @property
    def failures(self) -> list[PairReport]:
        return [p for p in self.pairs if p.failure]


@define
class Hunt:
    targets: list[str]
    subsystems: list[str] | None
    budget_s: float
    seed: int
    reproducer_dir: str
    report_dir: str = "."
    engine: str = "hypothesis"      # or "explore": seeded random walks (properties/explore.py)
    database: str | None = None     # redis://HOST:PORT or a directory (fixtures.profiles)

    def run(self) -> HuntReport:
        subsystems = self.subsystems or list(MACHINES)
        missing = [s for s in subsystems if s not in MACHINES]
        if missing:
            raise HarnessError(f"no state machine yet for {', '.join(missing)}; available: "
                               f"{', '.join(MACHINES)}")
        rng = random.Random(self.seed)
        report = HuntReport(self.seed, self.budget_s,
                            [PairReport(s, t) for s in subsystems for t in self.targets])
        profile = settings(settings.get_profile("hunt"), max_examples=ROUND_EXAMPLES,
                           phases=[Phase.explicit, Phase.reuse, Phase.generate],
                           database=example_database(self.database))
        start = time.monotonic()
        while time.monotonic() - start < self.budget_s:
            live = [p for p in report.pairs if not p.failure and not p.skipped]
            if not live:
                break
            for pair in live:
                self._round(pair, profile, rng.randrange(2**32))
                self._progress(pair, time.monotonic() - start)
                if time.monotonic() - start >= self.budget_s:
                    break
        self._write(report)
        return report

    def _round(self, pair: PairReport, profile: settings, seed: int) -> None:
        machine = machine_for(pair.subsystem)
        recorder = Recorder()
        began = time.monotonic()
        try:
            if self.engine == "explore":
                result = explore(machine, pair.target, seed=seed, runs=ROUND_EXAMPLES,
                                 recorder=recorder)
            else:
                result = run_machine(machine, pair.target, profile, seed=seed,
                                     recorder=recorder)
        except TargetUnavailable as why:
            pair.skipped = str(why)
            return
        pair.seconds += time.monotonic() - began
        pair.rounds += 1
        pair.examples += recorder.examples
        pair.steps += recorder.steps
        pair.events.update(recorder.events)
        if result.failure:
            path = write_reproducer(machine, result.failure, pair.target, self.reproducer_dir)
            pair.failure = {"property": result.failure.property,
                            "message": result.failure.message.splitlines()[0],
                            "calls": result.failure.calls, "reproducer": str(path),
                            "round_seed": seed}

    @staticmethod
    def _progress(p: PairReport, elapsed_s: float) -> None:
        state = ("FAILED " + p.failure["property"] if p.failure else
                 f"skipped ({p.skipped})" if p.skipped else "no failure yet")
        print(f"[{elapsed_s:6.1f}s] {p.subsystem} x {p.target}: {p.examples} examples, "
              f"{p.steps} steps, {state}", flush=True)

    def _write(self, report: HuntReport) -> None:
        out = Path(self.report_dir)
        out.mkdir(parents=True, exist_ok=True)
        data = {"seed": report.seed, "budget_s": report.budget_s, "pairs": [
            {"subsystem": p.subsystem, "target": p.target, "examples": p.examples,
             "steps": p.steps, "rounds": p.rounds, "seconds": round(p.seconds, 2),
             "steps_per_s": round(p.steps / p.seconds) if p.seconds else 0,
             "events": dict(sorted(p.events.items())), "failure": p.failure,
             "skipped": p.skipped} for p in report.pairs]}
        _atomic_write(out / "hunt-report.json", json.dumps(data, indent=2) + "\n")
        _atomic_write(out / "hunt-report.md", render_markdown(data))
        print(render_markdown(data), flush=True)


def render_markdown(data: dict) -> str:
    lines = [f"# Hunt report (seed {data['seed']}, budget {data['budget_s']:.0f}s)", "",
             "| subsystem | target | examples | steps | steps/s | result |",
             "|---|---|---|---|---|---|"]
    for p in data["pairs"]:
        result = (f"**{p['failure']['property']}** in {p['failure']['calls']} calls: "
                  f"`{p['failure']['reproducer']}`" if p["failure"] else
                  f"skipped: {p['skipped']}" if p["skipped"] else "no failure")
        lines.append(f"| {p['subsystem']} | {p['target']} | {p['examples']} | {p['steps']} | "
                     f"{p['steps_per_s']} | {result} |")
    lines += ["", "Hazards reached (events):", ""]
    for p in data["pairs"]:
        reached = ", ".join(f"{k} x{v}" for k, v in p["events"].items()) or "none"
        lines.append(f"- {p['subsystem']} x {p['target']}: {reached}")
    return "\n".join(lines) + "\n"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
