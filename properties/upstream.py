"""Upstream reproducers: a ``vllm`` target's failure as a test that needs only vLLM and pytest.

The harness's own reproducer (``reproducer.py``) runs on the model and a target through
``sim.targets.make``; a vLLM engineer cannot paste that into vLLM's suite. This file's form
calls the real class directly, builds requests the way vLLM's unit tests for that class do
(``MultiModalFeatureSpec`` entries with a ``PlaceholderRange``, ``get_num_encoder_embeds``),
keeps one effect comment per step, and stops at the first assertion the installed vLLM fails,
so the failing assertion is the last line. Its docstring names the property and the release.

Only the encoder cache has this form so far (``UPSTREAM`` lists the machines that do); the
emitted file is checked by executing it, line by line, against the installed vLLM.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from properties.harness import COMMON_PROPERTIES, Failure, HarnessMachine
from sim.files import atomic_write
from sim.outcomes import NO_RAISE

UPSTREAM = ("encoder_cache",)

HEADER = '''"""{property}: {what}.

Found by llm-cache-harness ({machine}, {calls} calls) against vLLM {release}; the test needs
only vLLM and pytest. Paste it into tests/v1/core/test_encoder_cache_manager.py.

Scenario: {message}
Each assertion holds the value a correct EncoderCacheManager returns; {last} on
vLLM {release}.
"""

from types import SimpleNamespace

from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
from vllm.v1.core.encoder_cache_manager import EncoderCacheManager


def request(request_id, *items):
    """A request as the scheduler hands it to the manager: one feature per (hash, size)."""
    sizes = [size for _, size in items]
    features = [MultiModalFeatureSpec(data=None, modality="image", identifier=mm_hash,
                                      mm_position=PlaceholderRange(offset=0, length=size))
                for mm_hash, size in items]
    return SimpleNamespace(request_id=request_id, mm_features=features,
                           get_num_encoder_embeds=sizes.__getitem__)


def {name}():
'''


def upstream_name(machine: type[HarnessMachine], failure: Failure) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", failure.property.lower()).strip("_")
    digest = hashlib.sha256(failure.trace.text().encode()).hexdigest()[:8]
    return f"test_{machine.subsystem}_{slug}_{digest}"


def body_lines(failure: Failure) -> list[str]:
    """The test body: the manager, the requests, then one line per call (state checks after
    the last call), in the vLLM-only spelling."""
    world = failure.trace.world
    lines = [f"cache = EncoderCacheManager(cache_size={world.cache_size})"]
    for req in world.requests:
        items = ", ".join(f"({item.mm_hash!r}, {item.num_embeds})" for item in req.items)
        lines.append(f"{req.request_id} = request({req.request_id!r}, {items})")
    for step in failure.trace.steps:
        call = step.call
        if step.expect is not None:
            op = "is" if step.expect in ("True", "False", "None") else "=="
            call = f"assert {call} {op} {step.expect}"
        lines.append(f"{call}  # {step.comment}")
        if step.check and step is not failure.trace.steps[-1]:
            lines.append(step.check)
    if failure.trace.steps:
        lines += list(failure.trace.steps[-1].state)
    return [_spell(line) for line in lines]


def _spell(line: str) -> str:
    return line.replace("assert slots(cache) == ",
                        "assert (cache.num_free_slots, cache.num_freeable_slots) == ")


def first_failing(lines: list[str]) -> int | None:
    """Index of the first line the installed vLLM fails (executing them in order)."""
    namespace: dict = {}
    exec(compile(HEADER.format(property="", what="", machine="", calls=0, release="",
                               message="", last="", name="_unused") + "    pass\n", "<upstream>",
                 "exec"), namespace)
    for index, line in enumerate(lines):
        try:
            exec(compile(line, "<upstream>", "exec"), namespace)
        except Exception:  # noqa: BLE001 - the failing assertion (or a crash) ends the test
            return index
    return None


def render_upstream(machine: type[HarnessMachine], failure: Failure, release: str) -> str | None:
    """The vLLM-only test, ending at the first failing line; None when vLLM passes it all
    (the divergence showed only in the harness's worker, which vLLM's unit test lacks)."""
    lines = body_lines(failure)
    failing = first_failing(lines)
    if failing is None:
        return None
    message = failure.message.splitlines()[0] if failure.message else failure.property
    what = {**COMMON_PROPERTIES, **machine.PROPERTIES}.get(failure.property, failure.property)
    last = "the last call raises" if failure.property == NO_RAISE else "the last one fails"
    header = HEADER.format(property=failure.property, what=what, machine=machine.__name__,
                           calls=failure.calls, release=release, message=message, last=last,
                           name=upstream_name(machine, failure))
    return header + "".join(f"    {line}\n" for line in lines[:failing + 1])


def write_upstream_reproducer(machine: type[HarnessMachine], failure: Failure,
                              directory: str | os.PathLike) -> Path | None:
    """Write ``upstream/upstream_test_<...>.py`` next to the harness's reproducers,
    atomically. Not named ``test_*.py``: ``replay`` of the harness's reproducers must not
    collect it (it fails by design, and needs vLLM); ``pytest FILE`` runs it all the same."""
    if machine.subsystem not in UPSTREAM or failure.trace.world is None:
        return None
    from sim.vllm.overlay import git_commit
    from sim.vllm.release import release_or_unknown
    release = release_or_unknown()
    checkout = os.environ.get("LCH_VLLM_PATH")     # set by --vllm-path: a checkout under test
    if checkout:
        commit = git_commit(checkout)
        release += f" + the checkout {checkout} (" + (f"commit {commit}" if commit else
                                                       "not a git checkout") + ")"
    text = render_upstream(machine, failure, release)
    if text is None:
        return None
    folder = Path(directory) / "upstream"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"upstream_{upstream_name(machine, failure)}.py"
    atomic_write(path, text)
    return path
