"""Private fields of vLLM's secondary tiers (``vllm/v1/kv_offload/tiering``) that the
secondary-tier and back-pressure adapters reach, one small accessor each, named for what it
reads or replaces; and what a release meant where it changed on purpose
(``model_semantics``).

No public call lets a test choose when a tier's I/O jobs and lookups run, or set the
back-pressure detector's high water after it is built; these accessors are the only places
the harness touches those fields. Each is tagged with the releases it holds for
(``# vLLM <version>:``): the file-system tier and its back-pressure detector were read and
run in 0.33.0, the one release the secondary-tier suites drive; a release that renames a
field fails in here, inside the adapter (``unavailable``), never as a finding.
"""

from __future__ import annotations

from typing import Any

from sim.vllm import release


def replace_io_pool(tier: Any, pool: Any) -> Any:
    """Shut the tier's I/O pool down and give it ``pool`` instead; returns ``pool``.

    # vLLM 0.33.0: ``FileSystemTierManager._pool``, a ``DualQueueThreadPool`` (built with no
    #   I/O threads, its shutdown joins nothing).
    """
    tier._pool.shutdown()
    tier._pool = pool
    return pool


def lookup_manager(tier: Any) -> Any:
    """The tier's asynchronous lookup manager.

    # vLLM 0.33.0: ``FileSystemTierManager._lookup_manager`` (an ``AsyncLookupManager``).
    """
    return tier._lookup_manager


def stop_lookup_thread(lookups: Any, queue: Any) -> None:
    """Stop the lookup manager's thread, then hand its worker ``queue`` as its input.

    # vLLM 0.33.0: ``AsyncLookupManager._lookup_queue`` (a None ends the worker) and
    #   ``_thread`` (the worker's thread).
    """
    lookups._lookup_queue.put(None)
    lookups._thread.join()
    lookups._lookup_queue = queue


def run_lookup_worker(lookups: Any, feed: Any, restore: Any) -> None:
    """Run the lookup manager's own worker body on this thread over ``feed`` (batches, then a
    None), then give it ``restore`` back as its input queue.

    # vLLM 0.33.0: ``AsyncLookupManager._worker()`` reads ``_lookup_queue`` until a None.
    """
    lookups._lookup_queue = feed
    try:
        lookups._worker()
    finally:
        lookups._lookup_queue = restore


def forget_temp_suffix(io: Any) -> None:
    """Drop this thread's temp-file suffix in ``tiering/fs/io.py``.

    # vLLM 0.33.0: ``io._thread_local.tmp_suffix``, a ``_{random 63-bit}.tmp`` drawn once per
    #   thread.
    """
    io._thread_local.__dict__.pop("tmp_suffix", None)


def set_store_latency(detector: Any, ema_s: float, high_water_s: float) -> None:
    """Set an ``EMABackpressureDetector``'s store-latency EMA and its high water (seconds).

    # vLLM 0.33.0: ``store_latency_ema`` (public) and ``_high`` (the high water, private; the
    #   constructor's ``high_water_s``).
    """
    detector.store_latency_ema, detector._high = float(ema_s), float(high_water_s)


def model_semantics(found: str, tier: str) -> dict[str, Any]:
    """The secondary-tier model's options for what release ``found`` meant.

    - ``store_marks_present``: a store job the file-system tier reports done makes its keys'
      lookups HIT at once (``AsyncLookupManager.mark_present``), superseding a probe queued
      or in flight. # vLLM >=0.34.0 (its docstring: a store completion is newer information
      than any probe started before it; a deliberate rule beside ``mark_miss``, which leaves
      a newer probe alone, #59096). vLLM 0.33.0: the probe's answer stands.
    """
    if tier != "fs" or not release.at_least("0.34.0", found):
        return {}
    return {"store_marks_present": True}
