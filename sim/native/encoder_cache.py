"""Native encoder cache manager: the bookkeeping an engine keeps, with running counters.

Written from ``docs/specs/encoder-cache.md`` the way an engine would write it (counters
updated in place, a freeable queue, per-request reference counts), so that the model, which
recomputes everything, is a genuinely different second opinion. Two catalogued bugs can be
switched back on:

- ``enc-stale-freed``: the pass's freed list is returned as recorded, including hashes that
  were reallocated later in the same pass (vLLM before the fix for issue #38551).
- ``enc-repeat-item``: a request that holds one hash through several inputs lets go of it at
  the first freed input, so the entry turns freeable while another input still needs it.
"""

from __future__ import annotations

from collections import Counter

from models.encoder_cache_values import ReqView


class NativeEncoderCache:
    def __init__(self, cache_size: int, bugs: frozenset[str] = frozenset()):
        self.cache_size = cache_size
        self.bugs = bugs
        self.num_free_slots = cache_size
        self.num_freeable_slots = cache_size
        self._size_of: dict[str, int] = {}                    # resident hash -> embeds
        self._held_by: dict[str, Counter[str]] = {}           # hash -> {request id: #inputs}
        self._inputs: dict[str, dict[int, str]] = {}          # request id -> {input id: hash}
        self._idle: dict[str, None] = {}                      # freeable queue, oldest first
        self._freed: list[str] = []

    def reset(self) -> None:
        self.__init__(self.cache_size, self.bugs)

    def check_and_update_cache(self, request: ReqView, input_id: int) -> bool:
        mm_hash = request.mm_hash(input_id)
        if mm_hash not in self._size_of:
            return False
        self._hold(request.request_id, input_id, mm_hash)
        return True

    def can_allocate(self, request: ReqView, input_id: int, encoder_compute_budget: int,
                     num_embeds_to_schedule: int) -> bool:
        size = request.num_embeds(input_id)
        if size > encoder_compute_budget:
            return False
        want = size + num_embeds_to_schedule
        if want > self.num_freeable_slots:
            return False
        while self.num_free_slots < want:
            victim = next(iter(self._idle))
            del self._idle[victim]
            self.num_free_slots += self._size_of.pop(victim)
            del self._held_by[victim]
            self._freed.append(victim)
        return True

    def allocate(self, request: ReqView, input_id: int) -> None:
        mm_hash, size = request.mm_hash(input_id), request.num_embeds(input_id)
        if mm_hash in self._size_of or size > self.num_free_slots:
            raise AssertionError(f"allocate({mm_hash!r}) without room or already resident")
        self._size_of[mm_hash] = size
        self._held_by[mm_hash] = Counter()
        self.num_free_slots -= size
        self.num_freeable_slots -= size
        self._hold(request.request_id, input_id, mm_hash)

    def free_encoder_input(self, request: ReqView, input_id: int) -> None:
        rid = request.request_id
        mm_hash = self._inputs.get(rid, {}).pop(input_id, None)
        if mm_hash is None:
            return
        if not self._inputs[rid]:
            del self._inputs[rid]
        holders = self._held_by.get(mm_hash)
        if holders is None or rid not in holders:       # evicted meanwhile: just forget it
            return
        holders[rid] -= 1
        if "enc-repeat-item" in self.bugs:
            holders[rid] = 0                            # BUG: first occurrence drops the hold
        if holders[rid] <= 0:
            del holders[rid]
        if not holders:
            self._idle[mm_hash] = None
            self.num_freeable_slots += self._size_of[mm_hash]

    def free(self, request: ReqView) -> None:
        for input_id in sorted(self._inputs.get(request.request_id, {})):
            self.free_encoder_input(request, input_id)

    def get_freed_mm_hashes(self) -> list[str]:
        freed, self._freed = self._freed, []
        if "enc-stale-freed" in self.bugs:
            return freed                                # BUG: stale same-pass evictions
        return [h for h in freed if h not in self._size_of]

    def get_cached_input_ids(self, request: ReqView) -> set[int]:
        return set(self._inputs.get(request.request_id, {}))

    def get_cached_num_encoder_embeds(self, request: ReqView, input_id: int) -> int | None:
        return self._size_of.get(request.mm_hash(input_id))

    def tracked_request_ids(self) -> set[str]:
        return set(self._inputs) | {rid for holders in self._held_by.values() for rid in holders}

    def resident_hashes(self) -> set[str]:
        return set(self._size_of)

    def freeable_order(self) -> list[str]:
        return list(self._idle)

    def check_valid(self) -> None:
        """Structural self-check: the counters agree with the maps they summarise."""
        resident = sum(self._size_of.values())
        idle = sum(self._size_of[h] for h in self._idle)
        assert self.num_free_slots == self.cache_size - resident, "free slots == unused space"
        assert self.num_freeable_slots == self.num_free_slots + idle, "freeable == free + idle"
        assert set(self._idle) == {h for h, c in self._held_by.items() if not c}, \
            "idle queue == unreferenced entries"
        assert set(self._held_by) == set(self._size_of), "every resident entry has holders"
        assert 0 <= self.num_free_slots <= self.num_freeable_slots <= self.cache_size, \
            "0 <= free <= freeable <= cache_size"

    # -- helpers -----------------------------------------------------------------------------

    def _hold(self, rid: str, input_id: int, mm_hash: str) -> None:
        inputs = self._inputs.setdefault(rid, {})
        if inputs.get(input_id) == mm_hash:
            return
        inputs[input_id] = mm_hash
        if mm_hash in self._idle:                       # freeable again held: leaves the queue
            del self._idle[mm_hash]
            self.num_freeable_slots -= self._size_of[mm_hash]
        self._held_by[mm_hash][rid] += 1
