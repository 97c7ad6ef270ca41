"""Reference model of vLLM's encoder-decoder cache manager (``EncoderDecoderCacheManager``).

Encoder-decoder models (Whisper) use the encoder cache manager for scheduling only: nothing
is shared between requests, nothing is evicted. What the manager promises:

- ``check_and_update_cache`` never hits: every request encodes its own inputs;
- the cache size is a budget of reserved embeddings: ``can_allocate`` approves an input
  within the compute budget only if it, plus the embeds already approved in this attempt,
  fits in the unreserved slots (no eviction makes room); ``allocate`` reserves it;
- a request holds each input it allocated until it frees it (``free_encoder_input``, or
  ``free`` for all of them); freeing an input the request does not hold releases nothing
  (the base class's rule, which the scheduler relies on: it frees every input of an
  encoder-decoder request after each decoding step, and frees requests it never allocated
  for when their KV allocation fails);
- ``get_cached_input_ids`` names every input of the request: no input is shared, so once
  decoding started the scheduler may drop them all;
- ``get_freed_mm_hashes`` at the end of pass N names the hashes allocated in pass N-1: the
  worker frees them *before* it runs pass N, so an output allocated in pass N is reported
  one pass later, once the pass that encoded it has run (and is never leaked);
- ``reset`` (weights updated) forgets every reservation and every pending report.

State is facts only (the reservations, the allocations of this pass and of the last); the
free slot count is computed from them.
"""

from __future__ import annotations

from attrs import define, field

from models.encoder_cache_values import ReqView


@define
class EncoderDecoderCacheModel:
    """What the encoder-decoder manager of ``cache_size`` embeddings must answer."""

    cache_size: int
    # (request_id, input_id) -> embeds reserved by that input, while the request holds it.
    reserved: dict[tuple[str, int], int] = field(factory=dict)
    allocated_this_pass: list[str] = field(factory=list)
    allocated_last_pass: list[str] = field(factory=list)

    def __attrs_post_init__(self) -> None:
        if self.cache_size < 1:
            raise ValueError(f"cache_size must be at least 1 embedding, got {self.cache_size}")

    @property
    def num_free_slots(self) -> int:
        return self.cache_size - sum(self.reserved.values())

    def holds(self, request: ReqView, input_id: int) -> bool:
        return (request.request_id, input_id) in self.reserved

    # -- the API -----------------------------------------------------------------------------

    def check_and_update_cache(self, request: ReqView, input_id: int) -> bool:
        return False

    def can_allocate(self, request: ReqView, input_id: int, encoder_compute_budget: int,
                     num_embeds_to_schedule: int) -> bool:
        needed = request.num_embeds(input_id)
        return (needed <= encoder_compute_budget
                and needed + num_embeds_to_schedule <= self.num_free_slots)

    def allocate(self, request: ReqView, input_id: int) -> None:
        num_embeds = request.num_embeds(input_id)
        if self.holds(request, input_id):
            raise ValueError(f"allocate({request.request_id}, {input_id}): already held; the "
                             "scheduler allocates an input again only after freeing it")
        if num_embeds > self.num_free_slots:
            raise ValueError(f"allocate({request.request_id}, {input_id}): {num_embeds} embeds "
                             f"but only {self.num_free_slots} free; call can_allocate first")
        self.reserved[(request.request_id, input_id)] = num_embeds
        self.allocated_this_pass.append(request.mm_hash(input_id))

    def free_encoder_input(self, request: ReqView, input_id: int) -> None:
        self.reserved.pop((request.request_id, input_id), None)

    def free(self, request: ReqView) -> None:
        # Everything the request holds goes; what it does not hold stays as it is.
        self.reserved = {held: size for held, size in self.reserved.items()
                         if held[0] != request.request_id}

    def get_freed_mm_hashes(self) -> list[str]:
        freed = self.allocated_last_pass
        self.allocated_last_pass, self.allocated_this_pass = self.allocated_this_pass, []
        return freed

    def get_cached_input_ids(self, request: ReqView) -> set[int]:
        return set(range(len(request.items)))

    def reset(self) -> None:
        self.reserved.clear()
        self.allocated_this_pass.clear()
        self.allocated_last_pass.clear()
