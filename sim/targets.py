"""Target registry: a target name -> a factory per subsystem.

Names: ``model`` (the reference model itself, for reproducers), ``native`` (in-tree
torch-backed implementations, the default), ``native:<bug-id>`` (native with one catalogued
bug switched on; ``native:<id>+<id>`` turns on several, e.g. two bugs of one subsystem for a
hunt that must report both) and ``vllm`` (the installed vLLM's real classes, imported lazily).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attrs import frozen

from sim.errors import AdapterError, HarnessError
from sim.manifests import Subsystem, all_manifests, resolve
from sim.native.bugs import BUG_SWITCHES, bug_subsystems
from sim.sizes import check_size

BASE_TARGETS = ("model", "native", "vllm")
# The subsystems and their factories come from their manifests (sim/manifests/), by rank.
SUBSYSTEMS = tuple(m.name for m in all_manifests())


@frozen
class Target:
    name: str
    base: str
    bug_ids: tuple[str, ...] = ()

    @property
    def bugs(self) -> frozenset[str]:
        return frozenset(self.bug_ids)

    @property
    def bug(self) -> str | None:
        """The switches as written after ``native:`` (None: none on)."""
        return "+".join(self.bug_ids) or None

    @property
    def bug_subsystems(self) -> tuple[str, ...]:
        """The subsystems any of the switches acts in (a switch is inert elsewhere)."""
        return tuple(dict.fromkeys(s for b in self.bug_ids for s in bug_subsystems(b)))


def known_target_names() -> list[str]:
    return [*BASE_TARGETS, *(f"native:{b}" for b in sorted(BUG_SWITCHES))]


def parse_target(name: str) -> Target:
    base, _, bug = name.partition(":")
    if base not in BASE_TARGETS:
        raise HarnessError(f"unknown target {name!r}; known targets: "
                           f"{', '.join(BASE_TARGETS)}, native:<bug-id> (bug ids: "
                           f"{', '.join(sorted(BUG_SWITCHES))})")
    if not bug:
        return Target(name, base)
    if base != "native":
        raise HarnessError(f"target {name!r}: only the native target takes a bug switch; "
                           f"use native:{bug}")
    ids = bug.split("+")
    for one in ids:
        if one not in BUG_SWITCHES:
            raise HarnessError(f"unknown bug id {one!r} in target {name!r}; known bug ids: "
                               f"{', '.join(sorted(BUG_SWITCHES))} (several: joined by +)")
    if len(set(ids)) != len(ids):
        raise HarnessError(f"target {name!r} names a bug twice; name each once")
    return Target(name, base, tuple(ids))


def factories(manifests: tuple[Subsystem, ...]) -> dict[tuple[str, str], Callable[..., Any]]:
    """(target base, subsystem) -> factory, as the manifests name them."""
    table = {}
    for manifest in manifests:
        for base, ref in manifest.factories.items():
            if base not in BASE_TARGETS:
                raise HarnessError(f"{manifest.source}: factories names target base {base!r}; "
                                   f"use one of {', '.join(BASE_TARGETS)}")
            table[(base, manifest.name)] = resolve(manifest, f"factories[{base!r}]", ref)
    return table


_FACTORIES: dict[tuple[str, str], Callable[..., Any]] = factories(all_manifests())


def make_drop_policy(name: str, policy: str = "throttled") -> Any:
    """A secondary tier's back-pressure drop policy (``models/backpressure.py``) of target
    ``name``: "drop" (DropStorePolicy) or "throttled" (ThrottledDropPolicy)."""
    base = parse_target(name).base
    if base == "model":
        from models.backpressure import DropPolicyModel
        return DropPolicyModel(policy)
    if base == "native":
        from sim.native.backpressure import NativeDropPolicy
        return NativeDropPolicy(policy)
    from sim.vllm.backpressure import VllmDropPolicy
    return VllmDropPolicy(policy)


def make_threaded_tier(name: str, unlocked: bool = False) -> Any:
    """A block tier callable from several threads (the linearizability test): ``native``
    (``unlocked``: its lock removed, the planted race) or vLLM's real file-system tier with
    its real I/O threads."""
    base = parse_target(name).base
    if base == "vllm":
        from sim.vllm.threaded_tier import VllmThreadedTier
        return VllmThreadedTier()
    from sim.native.threaded_tier import NativeThreadedTier
    return NativeThreadedTier(unlocked=unlocked)


def implemented_pairs() -> list[tuple[str, str]]:
    """(target base, subsystem) pairs that have an implementation, in a stable order."""
    return sorted(_FACTORIES)


def make(name: str, subsystem: str, **config: Any) -> Any:
    """Build the ``subsystem`` implementation of target ``name`` with ``config``."""
    target = parse_target(name)
    if subsystem not in SUBSYSTEMS:
        raise HarnessError(f"unknown subsystem {subsystem!r}; known: {', '.join(SUBSYSTEMS)}")
    if target.bug and subsystem not in target.bug_subsystems:
        raise HarnessError(f"bug {target.bug!r} belongs to the "
                           f"{' and '.join(target.bug_subsystems)} subsystem, "
                           f"not {subsystem}")
    factory = _FACTORIES.get((target.base, subsystem))
    if factory is None:
        raise HarnessError(f"target {target.base!r} has no {subsystem} implementation yet")
    if "cache_size" in config:
        check_size("cache_size", config["cache_size"])
    if target.base != "vllm":
        return factory(target, **config)
    try:
        return factory(target, **config)
    except HarnessError:
        raise
    except Exception as error:  # noqa: BLE001 - the adapter cannot build it on this release
        from sim.outcomes import classify
        verdict = classify(error)
        if verdict.kind == "divergence" and verdict.why:
            raise      # vLLM's own constructor raised, and no call shape can explain it
        raise AdapterError(f"building the vllm {subsystem} ({_config_text(config)}) failed: "
                           f"{verdict.detail} (at {verdict.where})") from error


def _config_text(config: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in config.items())
