"""ARC over the CPU manager on hand-written traces: the model, the native target and vLLM's
real ``CPUOffloadingManager`` with ``ARCCachePolicy``.

The machines reach these states rarely (``TieredLookupARCChurnMachine`` met a reused chunk
promoted to T2 while being written about once in 150 examples, never with its store failing
after): each trace here is a whole scenario, checked call by call against the model's values.
"""

from __future__ import annotations

import pytest

from models.tiered_lookup_values import LookupResult, StoreOutput
from properties.scenarios import agrees, make_or_skip

TARGETS = ["model", "native", "vllm"]


@pytest.mark.parametrize("target", TARGETS)
def test_a_failed_store_forgets_a_chunk_its_reuse_promoted(target):
    """Scenario (two chunks, ARC; request slots 0 and 1):
    - slot 0 stores 0; slot 1 loads it: a reuse, committed when slot 1 finishes.
    - slot 0 stores 1 and 2: 0 is evicted to B1. It stores 0 again (evicting 1): 0 is in T1,
      being written.
    - slot 1 finishes: its reuse of 0 moves the chunk to T2, written or not.
    - the write of 0 fails: the chunk is freed and the policy forgets 0 wherever it sits, T2
      included: a lookup misses, and the next store of 0 writes it."""
    mgr = make_or_skip(target, "tiered_lookup", num_chunks=2, eviction_policy="arc",
                       requests=((0, 1, 2), (0, 3)), calls=("finish_request",))
    agrees("store-outputs-agree", mgr.prepare_store([0]), StoreOutput((0,), ()))
    mgr.complete_store([0])
    mgr.use_request(1)
    mgr.prepare_load([0])
    mgr.complete_load([0])
    mgr.use_request(0)
    agrees("store-outputs-agree", mgr.prepare_store([1, 2]), StoreOutput((1, 2), (0,)))
    mgr.complete_store([1, 2])
    agrees("store-outputs-agree", mgr.prepare_store([0]), StoreOutput((0,), (1,)))
    mgr.use_request(1)
    mgr.finish_request()
    mgr.complete_store([0], success=False)
    agrees("lookup-results-agree", mgr.lookup(0), LookupResult.MISS)
    agrees("free-chunks-agree", mgr.num_free_chunks, 1)
    agrees("arc-memory-agrees", mgr.arc_memory(), ((1,), (), 0.0))
    mgr.use_request(0)
    agrees("store-outputs-agree", mgr.prepare_store([0]), StoreOutput((0,), ()))
