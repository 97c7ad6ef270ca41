"""A divergence named by what it is: its finding id, ``<subsystem>/<property>/<hash>``.

A hunt goes on past a divergence once it is minimized (``lch/hunt.py``), so it must tell a
second occurrence of a bug it already has from a second bug. A property alone cannot: two
bugs may break the same one (vLLM's encoder cache before 0.28.0 breaks ``slots-agree`` and
``freed-not-resident``; the scheduler before 0.32 breaks ``scheduler-output-agrees`` twice).
So a finding is keyed by the property AND its minimal program, normalized: the
configuration, then per call the API call made and the value the model expects it to
return, with the target's name left out (an id found on ``native`` names the same program on
``vllm``) and ids renamed in order of first appearance (``r3`` and ``img7`` in a program
that uses only those become ``r0`` and ``img0``).

The calls' arguments and the setup (which request carries which item) are left out: the
minimizer deletes steps and shrinks numbers but never moves an item from one request to
another, so one bug comes out of it in several such layouts (measured on
``native:enc-stale-freed+enc-repeat-item``: the stale freed entry as one request with two
items, or two requests with one each; the repeated item freed at input 0, or at input 1;
three and two ids with the arguments kept, one each without). What stays apart is what a
second bug changes: the configuration, the sequence of calls, or an answer (vLLM's two
``disable_chunked_mm_input`` bugs before 0.32 both add two requests and step once, with
different budgets and different scheduler outputs).

The id is written into each reproducer (``FINDING = ...``), so ``hunt --accept`` takes
either the id from a report or the reproducer file itself.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

from properties.harness import COMMON_PROPERTIES, Failure
from sim.errors import HarnessError

# An identifier the machines number: r0 (requests), img3 (items), t1 (templates). Neither
# preceded by a word character nor a dot (an attribute such as ``x.r0`` is not one).
_NUMBERED = re.compile(r"(?<![\w.])([A-Za-z]+)(\d+)\b")
_CALL = re.compile(r"\s*[A-Za-z_]\w*\.(\w+)\(")
_ID = re.compile(r"([a-z_]+)/([a-z0-9-]+)/([0-9a-f]{8})")
ID_EXAMPLE = "encoder_cache/slots-agree/1a2b3c4d"


def normalized_program(failure: Failure) -> str:
    """The program as text: configuration (without the target), then each call's API
    method and its expected value; numbered ids renamed in order of first appearance."""
    trace = failure.trace
    config = sorted((k, v) for k, v in trace.config.items() if k != "target")
    lines = [repr(config), *(f"{_method(s)} -> {s.expect}" for s in trace.steps)]
    return _renamed("\n".join(lines))


def _method(step) -> str:
    """``cache.allocate(r0, 0)`` -> ``allocate``: the API method a step calls (the machine's
    action name where the call is not a method call)."""
    match = _CALL.match(step.call)
    return match.group(1) if match else str(step.action[:1])


def _renamed(text: str) -> str:
    names: dict[str, dict[str, int]] = {}

    def rename(match: re.Match) -> str:
        prefix, number = match.groups()
        seen = names.setdefault(prefix, {})
        return f"{prefix}{seen.setdefault(number, len(seen))}"

    return _NUMBERED.sub(rename, text)


def finding_id(subsystem: str, failure: Failure) -> str:
    digest = hashlib.sha256(normalized_program(failure).encode()).hexdigest()[:8]
    return f"{subsystem}/{failure.property}/{digest}"


def parse_accept(text: str) -> list[str]:
    """``--accept`` values: a finding id as a report prints it, or a reproducer file (its
    ``FINDING`` / ``FINDINGS``). Anything else ends in one line naming the problem and the
    fix (``HarnessError``)."""
    if _ID.fullmatch(text):
        return [_checked_id(text, f"--accept {text}")]
    path = Path(text)
    if path.is_file() or path.suffix == ".py":
        return _ids_in_file(path, text)
    raise HarnessError(f"--accept {text!r} is neither a finding id (subsystem/property/hash, "
                       f"e.g. {ID_EXAMPLE}, as hunt-report.md prints it) nor a reproducer "
                       "file; copy the id from the report's divergence list")


def _checked_id(text: str, where: str) -> str:
    from properties.machines import MACHINES, machine_for
    subsystem, prop, _ = _ID.fullmatch(text).groups()
    if subsystem not in MACHINES:
        raise HarnessError(f"{where}: unknown subsystem {subsystem!r}; known: "
                           f"{', '.join(sorted(MACHINES))}")
    machine = machine_for(subsystem)
    if prop not in machine.PROPERTIES and prop not in COMMON_PROPERTIES:
        raise HarnessError(f"{where}: {subsystem} has no property {prop!r}; its properties: "
                           f"{', '.join(sorted({*machine.PROPERTIES, *COMMON_PROPERTIES}))}")
    return text


def _ids_in_file(path: Path, text: str) -> list[str]:
    if not path.is_file():
        raise HarnessError(f"--accept {text}: no such reproducer file; give a path to a "
                           f"reproducer (fixtures/reproducers/found/*.py) or a finding id "
                           f"such as {ID_EXAMPLE}")
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, OSError) as error:
        raise HarnessError(f"--accept {text}: cannot read it as Python ({error}); give a "
                           "reproducer file the hunt wrote, or the finding id") from None
    ids: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name) and \
                node.targets[0].id in ("FINDING", "FINDINGS"):
            value = ast.literal_eval(node.value)
            ids += [value] if isinstance(value, str) else list(value)
    if not ids:
        raise HarnessError(f"--accept {text}: the file names no finding (no FINDING line: "
                           "written by hand, or before hunts named findings); pass the "
                           "finding id from the hunt report, or rerun the hunt to rewrite it")
    bad = [i for i in ids if not _ID.fullmatch(i)]
    if bad:
        raise HarnessError(f"--accept {text}: FINDING {bad[0]!r} is not a finding id "
                           f"(subsystem/property/hash, e.g. {ID_EXAMPLE}); fix the line")
    return [_checked_id(i, f"--accept {text}") for i in ids]
