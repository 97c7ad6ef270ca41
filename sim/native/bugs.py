"""The bug switches of the native target: bug id -> the subsystem whose implementation
reads it, or a tuple of subsystems when a bug lives in a component several subsystems are built
on (the encoder cache's bugs also act in the scheduler pass, which drives that cache). The first
name is the bug's home: the catalogue runs its machine. ``native:<bug-id>`` turns exactly one
on. The catalogue in ``fixtures/known_bugs.py`` adds the source, the property that must catch
it and the bound on its minimal reproducer; a test keeps the two lists equal."""

from __future__ import annotations

from sim.native.prefix_cache_bugs import PREFIX_CACHE_BUGS

BUG_SWITCHES: dict[str, str | tuple[str, ...]] = {
    "enc-stale-freed": ("encoder_cache", "scheduler_pass"),
    "enc-repeat-item": ("encoder_cache", "scheduler_pass"),
    "encdec-freed-same-pass": "encoder_decoder_cache",
    "encdec-unheld-release": "encoder_decoder_cache",
    "sched-read-ahead-ungated": "scheduler_pass",
    "sched-budget-in-tokens": "scheduler_pass",
    "sched-encode-embedless": "scheduler_pass",
    "sched-preempt-keeps-inputs": "scheduler_pass",
    "sched-reset-worker-kept": "scheduler_pass",
    "sched-text-charged": "scheduler_pass",
    "sched-mismatch-scheduled": "scheduler_pass",
    "sched-mismatch-kept": "scheduler_pass",
    "sched-ec-charged": "scheduler_pass",
    "sched-ec-free-silent": "scheduler_pass",
    "sched-encdec-reencode": "scheduler_pass",
    "sched-encdec-held": "scheduler_pass",
    "sched-async-free-early": "scheduler_pass",
    "sched-mamba-mtp-stall": "scheduler_pass",
    "offload-id-reuse": "offload_engine",
    "offload-partial-block": "offload_engine",
    "offload-dropped-decode": "offload_engine",
    "offload-layer-alias": "offload_engine",
    "offload-race-read-before-load": "offload_engine",
    "offload-race-slot-reuse": "offload_engine",
    "offload-race-dbuf-overwrite": "offload_engine",
    "lookup-pending-as-miss": "tiered_lookup",
    "lookup-promote-when-full": "tiered_lookup",
    "arc-replace-inverted": "tiered_lookup",
    "arc-ghost-ignored": "tiered_lookup",
    "lru-tail-after-head": "tiered_lookup",
    "finish-replayed": "tiered_lookup",
    "fs-rename-before-write": "secondary_tier",
    "fs-failed-store-visible": "secondary_tier",
    "fs-probe-after-reset": "secondary_tier",
    "fs-dropped-store-counted": "secondary_tier",
    **dict.fromkeys(PREFIX_CACHE_BUGS, "prefix_cache"),
}


def bug_subsystems(bug_id: str) -> tuple[str, ...]:
    """The subsystems whose native implementation reads switch ``bug_id``, home first."""
    value = BUG_SWITCHES[bug_id]
    return (value,) if isinstance(value, str) else tuple(value)
