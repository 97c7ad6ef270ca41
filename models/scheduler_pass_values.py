"""Values of the scheduler-pass subsystem, shared by the model, the targets and reproducers
(frozen, with pasteable reprs). ``SchedRequest`` also answers the encoder cache's request
surface (``request_id``, ``mm_hash(i)``, ``num_embeds(i)``), so it is handed to a cache as is.
"""

from __future__ import annotations

from attrs import field, frozen

from models.encoder_cache_values import MmItem


def _mask(value) -> tuple[bool, ...] | None:
    return None if value is None else tuple(bool(x) for x in value)


def _frozen_dict(value: dict) -> dict:
    return dict(value)


@frozen
class PlacedItem:
    """A multimodal item placed in the prompt: its placeholder covers token positions
    ``[offset, offset + length)``. ``is_embed`` (vLLM's ``PlaceholderRange.is_embed``) says
    which of those positions take an encoder embedding; None means all of them. The encoder
    yields one embedding per True position, so an item's cost in the encoder budget and the
    cache is ``num_embeds``, which can be smaller than its token span (e.g. a video's
    timestamp or separator tokens inside its placeholder)."""

    mm_hash: str
    offset: int
    length: int
    is_embed: tuple[bool, ...] | None = field(default=None, converter=_mask)

    def __attrs_post_init__(self) -> None:
        if self.is_embed is not None and (len(self.is_embed) != self.length
                                          or not any(self.is_embed)):
            raise ValueError(f"{self.mm_hash}: is_embed must have {self.length} entries, at "
                             f"least one True (pass None when every position is an embed)")

    @property
    def end(self) -> int:
        return self.offset + self.length

    @property
    def num_embeds(self) -> int:
        return self.length if self.is_embed is None else sum(self.is_embed)

    def embeds_before(self, position: int) -> int:
        """Embeddings of this item at token positions below ``position`` (absolute): the
        index, in the encoder's output, of the first embed at or after ``position``."""
        span = min(max(position - self.offset, 0), self.length)
        return span if self.is_embed is None else sum(self.is_embed[:span])

    def mm_item(self) -> MmItem:
        return MmItem(self.mm_hash, self.num_embeds)


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
        return self.items[input_id].num_embeds

    def renamed(self, request_id: str) -> SchedRequest:
        return SchedRequest(request_id, self.prompt_len, self.max_tokens, self.items)




@frozen(hash=False)
class SchedulerOutputView:
    """What one scheduling pass hands the worker (vLLM's ``SchedulerOutput``, the encoder
    part): tokens per request, encoder inputs to run per request, hashes the worker must
    delete, how many tokens past its range each scheduled request's drafter may read
    (empty when the engine runs no drafter), and the encoder inputs the worker loads through
    an encoder-cache connector instead of encoding them (empty without one; vLLM carries
    these in ``ec_connector_metadata``).
    """

    num_scheduled_tokens: dict[str, int] = field(converter=_frozen_dict)
    scheduled_encoder_inputs: dict[str, tuple[int, ...]] = field(converter=_frozen_dict)
    free_encoder_mm_hashes: tuple[str, ...] = field(converter=tuple)
    num_read_ahead_tokens: dict[str, int] = field(converter=_frozen_dict, factory=dict)
    loaded_encoder_inputs: dict[str, tuple[int, ...]] = field(converter=_frozen_dict,
                                                              factory=dict)

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
