"""The tier-poll thread of vLLM's real ``TieringOffloadingManager`` (0.33.0 on): a secondary
tier that serves peers (``tolerates_off_thread_polling``) has its finished jobs noticed
between engine steps, with no manager call at all, within a bounded time; a tier that did not
ask waits for the next manager call; ``shutdown`` stops the thread before it releases the
tiers. The harness plays the tier (``sim/vllm/tiered_lookup.py``) and completes a cascade
job under the manager's lock, as the tier's own I/O completion would.

The thread runs on real time, so noticing is waited for (up to ``NOTICE_S``), never assumed;
the outcome does not depend on timing, only how soon it comes. The native manager and the
model have no thread: on those targets the test skips.
"""

from __future__ import annotations

import threading
import time

import pytest

from properties.run import unavailable
from properties.scenarios import agrees, holds
from sim.errors import CapabilityMissing, TargetUnavailable

NOTICE_S = 5.0          # the thread polls every 1 ms; 5 s absorbs a loaded machine
QUIET_S = 0.2           # how long an unpolled tier is watched for a poll it must not get
THREAD_NAME = "vllm_offload_tier_poll"


def _tiered(target: str, polled: bool):
    if target != "vllm":
        pytest.skip("the tier-poll thread is vLLM's (the native manager polls per call)")
    try:
        from sim.vllm import release
        from sim.vllm.tiered_lookup import VllmTieredLookup
        mgr = VllmTieredLookup(2, "memory", polled=polled)
    except CapabilityMissing as why:
        pytest.skip(str(why))
    except TargetUnavailable as why:
        unavailable(target, why)
    if not hasattr(mgr.manager, "poll_tiers"):
        pytest.skip(f"vLLM {release.release()}'s tiering manager has no tier-poll thread "
                    "(from 0.33.0)")
    return mgr


def _pinned_by_cascade(mgr) -> None:
    """Store key 0: its cascade job to the tier pins the chunk until a poll notices the job
    finished; the tier then finishes it."""
    mgr.prepare_store([0])
    mgr.complete_store([0])
    holds("ref-counts-agree", mgr.ref_cnt(0) == 1,
          "the cascade job pins the stored chunk until polled")
    mgr.complete_job(0)


def _ref_cnt(mgr, key: int) -> int | None:
    with mgr._locked():
        return mgr.ref_cnt(key)


def _poll_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME and t.is_alive()]


def test_polled_tier_is_served_between_steps(target):
    mgr = _tiered(target, polled=True)
    try:
        _pinned_by_cascade(mgr)
        deadline = time.monotonic() + NOTICE_S
        while _ref_cnt(mgr, 0) != 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        holds("tier-poll-thread", _ref_cnt(mgr, 0) == 0,
              f"the tier asked to be polled between steps, but {NOTICE_S} s after its cascade "
              "job finished no poll had noticed it: the chunk is still pinned (is the "
              "tier-poll thread started, and does its round poll the polled tiers?)")
        holds("pending-work-agrees", not mgr.has_pending_work(),
              "the noticed job is no pending work")
    finally:
        released = mgr.shutdown()
    agrees("shutdown-releases-all", released, ("secondary", "primary"))
    holds("tier-poll-thread", not _poll_threads(),
          "shutdown must stop the tier-poll thread (and wait for it)")


def test_unpolled_tier_waits_for_a_manager_call(target):
    mgr = _tiered(target, polled=False)
    try:
        _pinned_by_cascade(mgr)
        time.sleep(QUIET_S)
        holds("tier-poll-thread", _ref_cnt(mgr, 0) == 1,
              "a tier that did not ask for off-thread polling was polled between steps")
        holds("tier-poll-thread", not _poll_threads(),
              "no tier asked for the tier-poll thread, yet one runs")
        # This step polled already (prepare_store polls, and a step polls once); the next
        # step's first manager call polls: here its end.
        mgr.on_schedule_end()
        mgr.on_schedule_end()
        holds("ref-counts-agree", _ref_cnt(mgr, 0) == 0,
              "the next step's end polls the tier and drops the pin")
    finally:
        agrees("shutdown-releases-all", mgr.shutdown(), ("secondary", "primary"))
