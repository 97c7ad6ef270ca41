"""Values of the scheduler-pass subsystem, shared by the model, the targets and reproducers
(frozen, with pasteable reprs). ``SchedRequest`` also answers the encoder cache's request
surface (``request_id``, ``mm_hash(i)``, ``num_embeds(i)``), so it is handed to a cache as is.
"""

from __future__ import annotations

from attrs import field, frozen

from models.encoder_cache_values import MmItem


@frozen
class PlacedItem:
    """A multimodal item placed in the prompt: its placeholder covers token positions
    ``[offset, offset + length)`` and yields ``length`` encoder embeddings."""

    mm_hash: str
    offset: int
    length: int

    @property
    def end(self) -> int:
        return self.offset + self.length

    def mm_item(self) -> MmItem:
        return MmItem(self.mm_hash, self.length)


@frozen
class SchedRequest:
    """A request as the scheduler sees it: prompt length, max new tokens and its items,
    ordered by offset and not overlapping."""

    request_id: str
    prompt_len: int
    max_tokens: int
    items: tuple[PlacedItem, ...] = ()

    def mm_hash(self, input_id: int) -> str:
        return self.items[input_id].mm_hash

    def num_embeds(self, input_id: int) -> int:
        return self.items[input_id].length

    def renamed(self, request_id: str) -> SchedRequest:
        return SchedRequest(request_id, self.prompt_len, self.max_tokens, self.items)


def _frozen_dict(value: dict) -> dict:
    return dict(value)


@frozen(hash=False)
class SchedulerOutputView:
    """What one scheduling pass hands the worker (vLLM's ``SchedulerOutput``, the encoder
    part): tokens per request, encoder inputs to run per request, hashes the worker must
    delete, and how many tokens past its range each scheduled request's drafter may read
    (empty when the engine runs no drafter).
    """

    num_scheduled_tokens: dict[str, int] = field(converter=_frozen_dict)
    scheduled_encoder_inputs: dict[str, tuple[int, ...]] = field(converter=_frozen_dict)
    free_encoder_mm_hashes: tuple[str, ...] = field(converter=tuple)
    num_read_ahead_tokens: dict[str, int] = field(converter=_frozen_dict, factory=dict)

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())


@frozen
class Gathered:
    """Rows ``[start, end)`` of ``mm_hash``'s encoder output gathered for ``request_id``."""

    request_id: str
    mm_hash: str
    start: int
    end: int


@frozen(hash=False)
class StepView:
    """One engine step: the pass's output, the embeddings the worker gathered (in order),
    and the requests that finished when the output was applied."""

    output: SchedulerOutputView
    gathered: tuple[Gathered, ...] = field(converter=tuple)
    finished: tuple[str, ...] = field(converter=tuple)
