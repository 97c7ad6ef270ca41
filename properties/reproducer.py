"""Turn a minimized failing program into a standalone pytest file.

The file calls the target's public API directly (no Hypothesis), one call per line with a
comment on its effect, asserts the reference model's value at every step, and ends with
assertions on the whole observable state. It runs against the model and against the target it
failed on, so it can be pasted into an engine's own test suite. Files are named by a digest of
their program (the same failure twice writes one file) and written atomically.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from properties.findings import finding_id
from properties.harness import Failure, HarnessMachine
from properties.machines import finding_scope
from sim.files import atomic_write
from sim.outcomes import outside_label

DEFAULT_DIR = Path("fixtures/reproducers/found")


def reproducer_name(machine: type[HarnessMachine], failure: Failure, target: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", failure.property.lower()).strip("_")
    digest = hashlib.sha256(f"{target}\n{failure.trace.text()}".encode()).hexdigest()[:8]
    return f"test_{machine.subsystem}_{slug}_{digest}"


def render(machine: type[HarnessMachine], failure: Failure, target: str) -> str:
    name = reproducer_name(machine, failure, target)
    trace = failure.trace
    targets = ["model"] if target == "model" else ["model", target]
    body = [f"    {machine.reproducer_subject(trace.config)}"]
    body += [f"    {line}" for line in trace.setup]
    # The whole state after the last call (after setup, for a program that fails before
    # one): every invariant's check, so the file fails wherever a check did.
    state = trace.steps[-1].state if trace.steps else trace.setup_state
    for step in trace.steps:
        call = step.call
        if step.expect is not None:
            op = "is" if step.expect in ("True", "False", "None") else "=="
            call = f"assert {call} {op} {step.expect}"
        body.append(f"    {call}  # {step.comment}")
        # The last call's check, unless the state lines that end the file make it anyway.
        if step.check and (step is not trace.steps[-1] or step.check not in state):
            body.append(f"    {step.check}")
    dropped = [machine.STATE_LINES_OF.get(f.split("/")[1]) for _, f, _ in trace.adopted]
    body += [f"    {line}" for line in state if not any(d and d in line for d in dropped)]
    if trace.self_checked:     # the model has no self-check; the target's runs last
        body += ['    if target != "model":',
                 f"        {machine.SUBJECT}.check_valid()  # its own structural self-check"]
    message = failure.message.splitlines()[0] if failure.message else failure.property
    past = [f"    step {n}: {f} ({what})" for n, f, what in trace.adopted]
    if past:
        past = ["Accepted divergences this program goes on past (their checks are not asserted;",
                "on a release without them the program reaches the same step):", *past]
    lines = [
        f'"""Reproducer: {failure.property} fails on {target}.',
        "",
        f"Scenario ({failure.calls} calls, found by {machine.__name__} against {target}):",
        f"    {message}",
        *past,
        *([f"World {outside_label(trace.outside)}: not a finding against vLLM."]
          if trace.outside else []),
        "Each step asserts the reference model's value; the target fails where it diverges.",
        f"Run: pytest {DEFAULT_DIR}/{name}.py",
        '"""',
        "",
        "import pytest",
        "",
        *machine.REPRODUCER_IMPORTS,
        "from sim.targets import make",
        "",
        f"TARGETS = {targets!r}",
        "# The finding this program reproduces: `hunt --accept` takes the id (or this file).",
        f"FINDING = {finding_id(finding_scope(machine), failure)!r}",
        machine.REPRODUCER_HELPERS,
        "",
        '@pytest.mark.parametrize("target", TARGETS)',
        f"def {name}(target):",
        *body,
        "",
    ]
    return "\n".join(lines)


def write_reproducer(machine: type[HarnessMachine], failure: Failure, target: str,
                     directory: str | os.PathLike = DEFAULT_DIR) -> Path:
    """Write the reproducer atomically; an identical one already there is kept as is."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{reproducer_name(machine, failure, target)}.py"
    if path.exists():
        return path
    atomic_write(path, render(machine, failure, target))
    return path
