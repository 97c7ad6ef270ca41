"""What the CPU offload tier reports to the connector's metrics each step (vLLM 0.33.0
``CPUOffloadingManager.get_stats`` and ``config_info``), as counts of chunks.

- ``used``: chunks in use, neither free nor evictable: written pending or loading;
- ``writing``: chunks whose write is pending; ``reading``: the rest of ``used``;
- ``allocations``: the size of every store that went on to allocate since the last report
  (a store refused for room still counts: it tried), reported once;
- ``skipped``: store candidates the threshold turned away since the last report, reported
  once; None when no threshold filters (the counter is not reported at all);
- ``info``: the cache's static facts, one mapping per cache (none given: one empty one).
"""

from __future__ import annotations

from attrs import frozen


@frozen
class CacheStats:
    used: int
    writing: int
    reading: int
    allocations: tuple[int, ...]
    skipped: int | None
    info: tuple[tuple[tuple[str, str], ...], ...] = ((),)
