"""A short program for a new witness: run a machine against a broken stand-in under the
``ci`` profile and print the minimized failing program, to copy into a ``Scenario``.

    python -m properties.witnesses.find properties.encoder_cache_machine:EncoderCacheMachine \\
        fixtures.broken.encoder_cache:KeepsFinishedRequests
"""

from __future__ import annotations

import argparse
import sys

from hypothesis import Phase, settings

import fixtures.profiles  # noqa: F401 - registers the ci profile
from fixtures.broken import resolve
from properties.run import run_machine
from properties.witnesses.scenario import swapped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m properties.witnesses.find",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("machine", help="module:Class of the machine")
    parser.add_argument("standin", help="module:Class of the stand-in (fixtures.broken...)")
    parser.add_argument("--examples", type=int, default=300)
    args = parser.parse_args(argv)
    with swapped(args.standin):
        result = run_machine(resolve(args.machine), "native", settings(
            settings.get_profile("ci"), max_examples=args.examples,
            phases=[Phase.explicit, Phase.generate]))
    if result.failure is None:
        print(f"no failure in {args.examples} examples: write the program by hand")
        return 1
    failure = result.failure
    print(f"property: {failure.property} ({failure.calls} calls)\n{failure.message}")
    print(f"world = {failure.trace.world!r}")
    print(f"actions = {tuple(failure.trace.actions())!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
