"""Helpers of the written-out scenario tests (``test_*`` files that check one hand-written
trace on several targets): build a target or skip saying why it cannot run the scenario, and
check a value against the expected one under a declared property.

A scenario's check names the property it checks, as a machine's does (``PropertyFailed``):
a failure then says *what* broke, and the mutation campaigns (``lch/kills.py``) count a test
failure as a kill only when it names a declared property. The names are a machine's
``PROPERTIES`` where the scenario checks what a machine checks, or ``SCENARIO_PROPERTIES``
for what only written-out scenarios check (the tier-poll thread's timing and locking)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from properties.harness import PropertyFailed
from properties.run import unavailable
from sim.errors import CapabilityMissing, HarnessError, NotDriven, TargetUnavailable
from sim.targets import make

# Checked only by written-out scenarios (no machine drives these): name -> what holds.
SCENARIO_PROPERTIES = {
    "hit-is-longest-cached": "a hybrid Mamba model's lookup hits the longest prefix whose "
                             "every full-attention block and whose last Mamba state the pool "
                             "caches, within its cap (properties/hybrid_hit_check.py)",
    "hit-blocks-cached": "a hybrid Mamba model's hit holds, per group, the blocks the pool "
                         "caches under the request's prefixes there (a Mamba group: null, "
                         "then its state's block) (properties/hybrid_hit_check.py)",
    "state-computed-before-read": "a request is scheduled on a Mamba state only once a step "
                                  "that computes it has run: a hit on a state cached in the "
                                  "same step waits (properties/hybrid_hit_check.py)",
    "kept-state-cached": "at the step a prompt's chunk ends where the cache keeps the Mamba "
                         "state (the replay boundary; block ends as retention says), a "
                         "repeat of the prompt is served up to there in every group "
                         "(properties/hybrid_hit_check.py)",
    "kept-state-reachable": "under sparse Mamba state retention, the cache keeps no state "
                            "where no later request can resume: only an interval's multiple, "
                            "the replay boundary (or a drafter's block or unit below it), or a "
                            "lookup's shared-prefix junction (properties/hybrid_hit_check.py)",
    "passed-states-retired": "once a step allocated for a request, its Mamba group holds no "
                             "block before the one of the state after its last processed "
                             "token (properties/mamba_holdings_check.py)",
    "live-state-held": "once a step allocated for a request, its Mamba group holds the block "
                       "of the state after its last processed token "
                       "(properties/mamba_holdings_check.py)",
    "events-claim-only-cached": "a consumer replaying the KV events never holds a prefix the "
                                "pool does not cache (properties/kv_event_mirror.py)",
    "tier-poll-thread": "the tier-poll thread is a daemon that runs exactly when a tier asked "
                        "for it and the interval is positive, notices a polled tier's "
                        "finished jobs between steps, and stops at shutdown",
    "tier-poll-give-up": "rounds failing without a break end the tier-poll thread after "
                         "_TIER_POLL_GIVE_UP_AFTER_S (a success restarts the count), logging "
                         "a run of failures at most once per interval",
    "tier-poll-back-off": "rounds failing without a break never end the tier-poll thread "
                          "(vLLM 0.34.0 on): after _TIER_POLL_BACK_OFF_AFTER_S it pauses "
                          "_TIER_POLL_BACKOFF_S between rounds, saying so once, until a "
                          "success restarts the count; a run of failures is logged at most "
                          "once per interval",
    "tier-poll-locking": "a round polls tiers only holding the manager's lock and pauses only "
                         "without it; a lock unavailable past the stall limit is warned of "
                         "once per limit",
    "tier-poll-shutdown": "shutdown never shuts a tier down under a running round (it raises "
                          "while the round keeps the lock, else holds the lock itself), and a "
                          "tier whose shutdown fails keeps the primary's memory",
    "drops-agree": "a back-pressure policy keeps or drops each store as the model does, never "
                   "drops a store to a tier not under pressure, and counts each drop once",
    "hazards-agree": "on the same seeds a machine reaches every hazard as often against vLLM "
                     "as against native",
}


@functools.cache
def declared_properties() -> frozenset[str]:
    """Every property some check declares: the machines' ``PROPERTIES`` (and the common
    ones), those of the modules each manifest checks against its spec (``spec_properties``:
    the tiering layer's machine, vLLM only), and ``SCENARIO_PROPERTIES``."""
    import importlib

    from properties.harness import COMMON_PROPERTIES, HarnessMachine
    from properties.machines import import_all_machines
    from sim.manifests import all_manifests
    import_all_machines()
    for manifest in all_manifests():
        for module in manifest.spec_properties:
            importlib.import_module(module)
    names = set(COMMON_PROPERTIES) | set(SCENARIO_PROPERTIES)
    todo = [HarnessMachine]
    while todo:                       # every machine class loaded, subclasses of subclasses
        cls = todo.pop()
        names.update(getattr(cls, "PROPERTIES", {}))
        todo += cls.__subclasses__()
    return frozenset(names)


def _declared(property: str) -> str:
    if property not in declared_properties():
        raise HarnessError(f"a scenario checks undeclared property {property!r}: name one of a "
                           "machine's PROPERTIES or add it to properties/scenarios.py "
                           "SCENARIO_PROPERTIES")
    return property


def agrees(property: str, actual: Any, expect: Any) -> None:
    """``property`` holds: the target's value is the expected one. The message shows both
    (mutation runs read it without pytest's assertion rewriting)."""
    _declared(property)
    if actual != expect:
        raise PropertyFailed(property, f"{actual!r} != expected {expect!r}")


def holds(property: str, ok: object, detail: str | Callable[[], str]) -> None:
    """``property`` holds when ``ok`` is true; ``detail`` (or what it returns, computed only
    on failure) says what was seen."""
    _declared(property)
    if not ok:
        raise PropertyFailed(property, detail() if callable(detail) else detail)


def make_or_skip(target: str, subsystem: str, drives: str | tuple[str, ...] | None = None,
                 calls: tuple[str, ...] = (), **config: Any) -> Any:
    """``make(target, subsystem, **config)``, or a skip naming why the target cannot run the
    scenario: it is missing here, it reports that it does not drive a world option of
    ``drives`` (its ``drives_<option>`` is false, ``why_no_<option>`` says why), or one of the
    ``calls`` the scenario makes is one the target's release lacks or the harness does not
    map there (its ``missing_calls``, which a machine's rules leave out the same way)."""
    try:
        port = make(target, subsystem, **config)
    except TargetUnavailable as why:
        unavailable(target, why)     # a skip, or a failure where targets are required
    for option in (drives,) if isinstance(drives, str) else drives or ():
        if not getattr(port, f"drives_{option}", True):
            pytest.skip(getattr(port, f"why_no_{option}", f"{target} does not drive {option}"))
    for call in calls:
        reason = getattr(port, "missing_calls", {}).get(call)
        if reason is not None:
            unmapped = reason.startswith("unavailable: ")
            unavailable(target, NotDriven(reason.removeprefix("unavailable: ")) if unmapped
                        else CapabilityMissing(reason))
    return port
