"""Values shared by models, targets and reproducers (frozen, hashable, pasteable reprs)."""

from __future__ import annotations

from attrs import frozen


@frozen
class MmItem:
    """One multimodal item of a request: its hash and how many encoder embeddings it yields."""

    mm_hash: str
    num_embeds: int


@frozen
class ReqView:
    """A request as the encoder cache sees it: an id and its multimodal items, in order.

    The minimal surface vLLM's ``EncoderCacheManager`` reads (``request_id``, the item's
    identifier, its embed count); adapters translate it into whatever a target expects.
    """

    request_id: str
    items: tuple[MmItem, ...]

    def mm_hash(self, input_id: int) -> str:
        return self.items[input_id].mm_hash

    def num_embeds(self, input_id: int) -> int:
        return self.items[input_id].num_embeds
