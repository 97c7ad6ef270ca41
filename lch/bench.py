"""Benchmarks (``nox -s bench``): ratios against a baseline measured in the same run.

1. Steps per second of each subsystem's machine on ``native`` next to a trivial
   RuleBasedStateMachine (one counter, one rule, one invariant) run with the same settings:
   the ratio is the harness's cost over Hypothesis's own floor.
2. For every catalogued bug: examples and seconds to the first failure, seconds to minimize,
   and the minimized length, over several seeds.

CPU time of this process (time.process_time) is read here only, outside any state machine
run: it is steadier than wall time on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test


class TrivialMachine(RuleBasedStateMachine):
    """The floor: what Hypothesis's stateful engine costs per step with nothing to check."""

    steps = 0

    def __init__(self):
        super().__init__()
        self.total = 0

    @rule(n=st.integers(0, 3))
    def add(self, n):
        self.total += n
        TrivialMachine.steps += 1

    @invariant()
    def non_negative(self):
        assert self.total >= 0


def steps_per_second(examples: int) -> list[tuple[str, float, float]]:
    from properties.machines import MACHINES, machine_for
    from properties.run import run_machine

    profile = settings(settings.get_profile("ci"), max_examples=examples,
                       phases=[Phase.generate], derandomize=False)
    warm_up = settings(profile, max_examples=5)
    for subsystem in MACHINES:           # imports, device setup and caches stay out of timing
        run_machine(machine_for(subsystem), "native", warm_up, seed=0)
    run_state_machine_as_test(TrivialMachine, settings=warm_up)
    TrivialMachine.steps = 0
    began = time.process_time()
    run_state_machine_as_test(TrivialMachine, settings=profile)
    trivial = TrivialMachine.steps / (time.process_time() - began)
    rows = [("trivial RuleBasedStateMachine", trivial, 1.0)]
    for subsystem in MACHINES:
        began = time.process_time()
        result = run_machine(machine_for(subsystem), "native", profile, seed=1)
        rate = result.recorder.steps / (time.process_time() - began)
        rows.append((f"{subsystem} x native", rate, trivial / rate))
    return rows


def time_to_find(seeds: int) -> list[dict]:
    from fixtures.known_bugs import CATALOGUE
    from properties.machines import MACHINES, machine_for
    from properties.run import minimize, run_machine

    rows = []
    # Every bug in its home subsystem, then in the others its switch acts in (also_caught_by).
    cases = [(bug, bug.subsystem, bug.max_calls, bug.id) for bug in CATALOGUE]
    cases += [(bug, sub, bound, f"{bug.id}@{sub}") for bug in CATALOGUE
              for sub, _, bound, _ in bug.also_caught_by]
    for bug, subsystem, bound, label in cases:
        if subsystem not in MACHINES:
            continue
        machine, target = machine_for(subsystem), f"native:{bug.id}"
        found_s, shrink_s, examples, calls = [], [], [], []
        profile = settings(settings.get_profile("ci"), derandomize=False, database=None,
                           max_examples=2000, phases=[Phase.generate])
        for seed in range(seeds):
            began = time.process_time()
            result = run_machine(machine, target, profile, seed=seed, shrink_program=False)
            found_s.append(time.process_time() - began)
            if result.failure is None:
                continue
            examples.append(result.recorder.examples)
            began = time.process_time()
            calls.append(minimize(machine, result.failure, target).calls)
            shrink_s.append(time.process_time() - began)
        rows.append({"bug": label, "found": f"{len(calls)}/{seeds}",
                     "examples_median": statistics.median(examples) if examples else None,
                     "find_s_median": round(statistics.median(found_s), 3),
                     "shrink_s_median": round(statistics.median(shrink_s), 3) if shrink_s
                     else None,
                     "calls_max": max(calls) if calls else None, "bound": bound})
    return rows


def main(argv: list[str] | None = None) -> int:
    import fixtures.profiles  # noqa: F401 - registers the Hypothesis profiles

    parser = argparse.ArgumentParser(prog="python -m lch.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args(argv)
    print(f"{'machine':40} {'steps/s':>10} {'trivial/this':>13}")
    for name, rate, ratio in steps_per_second(args.examples):
        print(f"{name:40} {rate:10.0f} {ratio:12.2f}x")
    print()
    print(f"{'bug':36} {'found':>7} {'examples':>9} {'find s':>8} {'shrink s':>9} "
          f"{'calls':>6} {'bound':>6}")
    for row in time_to_find(args.seeds):
        print(f"{row['bug']:36} {row['found']:>7} {row['examples_median']!s:>9} "
              f"{row['find_s_median']:>8} {row['shrink_s_median']!s:>9} "
              f"{row['calls_max']!s:>6} {row['bound']:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
