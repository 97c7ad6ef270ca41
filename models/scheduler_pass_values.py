"""Values of the scheduler pass, shared by the model, the targets and reproducers.
``SchedRequest`` also answers an encoder cache's request surface (``mm_hash``, ``num_embeds``).
"""

from __future__ import annotations

from attrs import field, frozen

from models.encoder_cache_values import MmItem


@frozen
class PlacedItem:
    """An item whose placeholder covers positions ``[offset, offset + length)``; ``is_embed``
    (vLLM's ``PlaceholderRange.is_embed``, None: all) says which take an embedding."""

    mm_hash: str
    offset: int
    length: int
    is_embed: tuple[bool, ...] | None = field(default=None, converter=lambda m: m if m is None
                                              else tuple(map(bool, m)))

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

    @property
    def embed_positions(self) -> tuple[int, ...]:
        return tuple(self.offset + i for i in range(self.length)
                     if self.is_embed is None or self.is_embed[i])

    def has_embed_in(self, lo: int, hi: int) -> bool:
        return any(lo <= p < hi for p in self.embed_positions)

    def mm_item(self) -> MmItem:
        return MmItem(self.mm_hash, self.num_embeds)


@frozen
class SchedRequest:
    """A request as the scheduler sees it; its items ordered by offset, not overlapping."""

    request_id: str
    prompt_len: int
    max_tokens: int
    items: tuple[PlacedItem, ...] = ()

    def mm_hash(self, input_id: int) -> str:
        return self.items[input_id].mm_hash

    def num_embeds(self, input_id: int) -> int:
        return self.items[input_id].num_embeds

    def inputs_in(self, lo: int, hi: int) -> tuple[int, ...]:
        """Input ids of the items with a position in ``[lo, hi)`` (the prompt's only)."""
        return tuple(i for i, x in enumerate(self.items)
                     if x.offset < self.prompt_len and max(x.offset, lo) < min(x.end, hi))


@frozen(hash=False)
class SchedulerOutputView:
    """What a pass hands the worker (vLLM's ``SchedulerOutput``, encoder part): tokens, inputs
    to encode, hashes to delete, drafter read-aheads, inputs loaded through an EC connector."""

    num_scheduled_tokens: dict[str, int] = field(converter=dict)
    scheduled_encoder_inputs: dict[str, tuple[int, ...]] = field(converter=dict)
    free_encoder_mm_hashes: tuple[str, ...] = field(converter=tuple)
    num_read_ahead_tokens: dict[str, int] = field(converter=dict, factory=dict)
    loaded_encoder_inputs: dict[str, tuple[int, ...]] = field(converter=dict, factory=dict)


@frozen
class Gathered:
    """Rows ``[start, end)`` of ``mm_hash``'s encoder output gathered for ``request_id``."""

    request_id: str
    mm_hash: str
    start: int
    end: int


@frozen(hash=False)
class StepView:
    """One engine step: the output, the rows gathered (in order), the requests finished."""

    output: SchedulerOutputView
    gathered: tuple[Gathered, ...] = field(converter=tuple)
    finished: tuple[str, ...] = field(converter=tuple)
