"""A divergence named by its cause: its finding id, ``<subsystem>/<property>/<hash>``
(``<subsystem>.<machine>/...`` for a subsystem's further machine, ``Subsystem.machines``).

A hunt goes on past a divergence once it is accepted (``lch/hunt.py``), so it must tell a
second occurrence of a bug it already has from a second bug, and it must tell it *live*, at
the failing check, to adopt the target's behaviour there and go on (``properties/harness.py``
``HarnessMachine.fail``). So a finding is keyed by its signature (``properties/signatures.py``):
the property, the call whose answer differs and the shape of the difference, numbers and
numbered ids abstracted. The minimal program no longer names a finding (one bug came out of the
minimizer in several layouts, each its own id: vLLM 0.14.0's offered key evicted, seven ids);
it names an *example* of one (``program_id``), and a finding's group lists its examples.

The id is written into each reproducer (``FINDING = ...``), so ``hunt --accept`` takes
either the id from a report or the reproducer file itself. Reading ids never imports a machine
(``parse_accept(..., check=False)``): ``history`` runs in a venv without torch.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

from properties.harness import COMMON_PROPERTIES, Failure
from properties.signatures import method_of, signature_id, signature_text
from sim.errors import HarnessError

# An identifier the machines number: r0 (requests), img3 (items), t1 (templates). Neither
# preceded by a word character nor a dot (an attribute such as ``x.r0`` is not one).
_NUMBERED = re.compile(r"(?<![\w.])([A-Za-z]+)(\d+)\b")
# ``<subsystem>`` or, for a further machine of it, ``<subsystem>.<machine>``.
_ID = re.compile(r"([a-z_]+(?:\.[a-z_]+)?)/([a-z0-9-]+)/([0-9a-f]{8})")
ID_EXAMPLE = "encoder_cache/slots-agree/1a2b3c4d"


def signature(failure: Failure) -> str:
    """The failure's signature text: property | failing call | shape of the difference."""
    return signature_text(failure.property, failure.message, failure.error)


def finding_id(subsystem: str, failure: Failure) -> str:
    """The finding (group) a failure belongs to: one id per cause. ``subsystem``: the hunt
    name of the machine (``properties.machines.finding_scope``)."""
    return signature_id(subsystem, failure.property, signature(failure))


def program_id(subsystem: str, failure: Failure) -> str:
    """One *example* of a finding: its minimal program, normalized (the id before
    signatures), so a group can list the distinct programs that showed it."""
    digest = hashlib.sha256(normalized_program(failure).encode()).hexdigest()[:8]
    return f"{subsystem}/{failure.property}/{digest}"


def normalized_program(failure: Failure) -> str:
    """The program as text: configuration (without the target), then each call's API
    method and its expected value; numbered ids renamed in order of first appearance."""
    trace = failure.trace
    config = sorted((k, v) for k, v in trace.config.items() if k != "target")
    lines = [repr(config), *(f"{method_of(s)} -> {s.expect}" for s in trace.steps)]
    return _renamed("\n".join(lines))


def _renamed(text: str) -> str:
    names: dict[str, dict[str, int]] = {}

    def rename(match: re.Match) -> str:
        prefix, number = match.groups()
        seen = names.setdefault(prefix, {})
        return f"{prefix}{seen.setdefault(number, len(seen))}"

    return _NUMBERED.sub(rename, text)


def parse_accept(text: str, check: bool = True) -> list[str]:
    """``--accept`` values: a finding id as a report prints it, or a reproducer file (its
    ``FINDING`` / ``FINDINGS``). Anything else ends in one line naming the problem and the
    fix (``HarnessError``). ``check=False``: the ids' subsystem and property are not looked
    up in the machines (which import torch)."""
    if _ID.fullmatch(text):
        return [_checked_id(text, f"--accept {text}")] if check else [text]
    path = Path(text)
    if path.is_file() or path.suffix == ".py":
        return _ids_in_file(path, text, check)
    raise HarnessError(f"--accept {text!r} is neither a finding id (subsystem/property/hash, "
                       f"e.g. {ID_EXAMPLE}, as hunt-report.md prints it) nor a reproducer "
                       "file; copy the id from the report's divergence list")


def _checked_id(text: str, where: str) -> str:
    from properties.machines import HUNT_MACHINES, machine_for
    subsystem, prop, _ = _ID.fullmatch(text).groups()
    if subsystem not in HUNT_MACHINES:
        raise HarnessError(f"{where}: unknown subsystem {subsystem!r}; known (and their "
                           f"further machines): {', '.join(sorted(HUNT_MACHINES))}")
    machine = machine_for(subsystem)
    if prop not in machine.PROPERTIES and prop not in COMMON_PROPERTIES:
        raise HarnessError(f"{where}: {subsystem} has no property {prop!r}; its properties: "
                           f"{', '.join(sorted({*machine.PROPERTIES, *COMMON_PROPERTIES}))}")
    return text


def _ids_in_file(path: Path, text: str, check: bool = True) -> list[str]:
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
    return [_checked_id(i, f"--accept {text}") if check else i for i in ids]
