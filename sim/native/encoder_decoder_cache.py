"""Native encoder-decoder cache manager: a slot budget kept as a running counter.

Written the way an engine would (one counter updated in place, a per-request ledger of what
each request reserved, a two-stage report queue), so the model, which sums its reservations,
is a second opinion. Two catalogued bugs can be switched back on:

- ``encdec-freed-same-pass``: ``get_freed_mm_hashes`` reports the hashes allocated in the
  pass it ends (vLLM 0.14.0). The worker frees them before it runs that pass, when they are
  not encoded yet, so it frees nothing and the outputs it then encodes are never freed.
- ``encdec-unheld-release``: ``free_encoder_input`` gives back the input's embeds whether or
  not the request holds them (vLLM 0.14.0 to 0.33.0). The scheduler frees every input of an
  encoder-decoder request after each decoding step, so the free slots grow past the cache.
"""

from __future__ import annotations

from models.encoder_cache_values import ReqView


class NativeEncoderDecoderCache:
    def __init__(self, cache_size: int, bugs: frozenset[str] = frozenset()):
        self.cache_size = cache_size
        self.bugs = bugs
        self.num_free_slots = cache_size
        self._ledger: dict[str, dict[int, int]] = {}    # request id -> {input id: embeds}
        self._encoding: list[str] = []                  # allocated in this pass
        self._to_free: list[str] = []                   # allocated in the last pass

    def reset(self) -> None:
        self.__init__(self.cache_size, self.bugs)

    def check_and_update_cache(self, request: ReqView, input_id: int) -> bool:
        return False                                    # nothing is shared: always encode

    def can_allocate(self, request: ReqView, input_id: int, encoder_compute_budget: int,
                     num_embeds_to_schedule: int) -> bool:
        size = request.num_embeds(input_id)
        if size > encoder_compute_budget:
            return False
        return size + num_embeds_to_schedule <= self.num_free_slots

    def allocate(self, request: ReqView, input_id: int) -> None:
        size = request.num_embeds(input_id)
        held = self._ledger.setdefault(request.request_id, {})
        if input_id in held or size > self.num_free_slots:
            raise AssertionError(f"allocate({request.request_id}, {input_id}) without room "
                                 "or while already held")
        held[input_id] = size
        self.num_free_slots -= size
        self._encoding.append(request.mm_hash(input_id))

    def free_encoder_input(self, request: ReqView, input_id: int) -> None:
        held = self._ledger.get(request.request_id, {})
        size = held.pop(input_id, None)
        if not held:
            self._ledger.pop(request.request_id, None)
        if size is None and "encdec-unheld-release" in self.bugs:
            size = request.num_embeds(input_id)         # BUG: releases what it never held
        if size is not None:
            self.num_free_slots += size

    def free(self, request: ReqView) -> None:
        for input_id in range(len(request.items)):
            self.free_encoder_input(request, input_id)

    def get_freed_mm_hashes(self) -> list[str]:
        if "encdec-freed-same-pass" in self.bugs:       # BUG: freed before the pass runs
            freed, self._encoding = self._encoding, []
            return freed
        freed, self._to_free, self._encoding = self._to_free, self._encoding, []
        return freed

    def get_cached_input_ids(self, request: ReqView) -> set[int]:
        return set(range(len(request.items)))

    def check_valid(self) -> None:
        """Structural self-check: the counter agrees with the ledger it summarises."""
        reserved = sum(sum(held.values()) for held in self._ledger.values())
        assert self.num_free_slots == self.cache_size - reserved, "free slots == unreserved"
        assert all(self._ledger.values()), "no empty ledger left behind"
