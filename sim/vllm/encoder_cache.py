"""The ``vllm`` target's encoder cache: the installed vLLM's real ``EncoderCacheManager``.

The adapter implements ``sim.ports.EncoderCachePort``: it takes our ``ReqView`` values,
translates each into a duck-typed request exposing exactly what the manager reads
(``request_id``, the items' hashes, their sizes; see ``encoder_cache_compat.py`` for the
spellings) and
forwards the call. The translation is cached per ``ReqView``, so a step costs one dictionary
lookup on top of vLLM's own work. Nothing else is wrapped: the counters the machine reads
(``cache_size``, ``num_free_slots``, ``num_freeable_slots``) are the manager's own.
"""

from __future__ import annotations

from typing import Any

from models.encoder_cache_values import ReqView
from sim.vllm import encoder_cache_compat, release


class _Feature:
    """What the manager reads of one ``mm_features`` entry: its identifier (the item hash)."""

    __slots__ = ("identifier",)

    def __init__(self, identifier: str):
        self.identifier = identifier


def request_type(items_attribute: str, embeds_method: str) -> type:
    """A request class exposing only ``request_id``, ``items_attribute`` and
    ``embeds_method(i)``: a read of anything else fails loudly instead of passing unseen."""

    def __init__(self, view: ReqView) -> None:
        self.request_id = view.request_id
        if items_attribute == "mm_features":
            self.mm_features = [_Feature(item.mm_hash) for item in view.items]
        else:
            self.mm_hashes = [item.mm_hash for item in view.items]
        self._num_embeds = [item.num_embeds for item in view.items]

    def num_embeds(self, input_id: int) -> int:
        return self._num_embeds[input_id]

    return type("VllmDuckRequest", (), {
        "__slots__": ("request_id", items_attribute, "_num_embeds"),
        "__init__": __init__,
        embeds_method: num_embeds,
        "__repr__": lambda self: f"VllmDuckRequest({self.request_id!r})",
    })


class VllmCacheManager:
    """The calls every encoder-side manager answers (``EncoderCacheManager`` and its
    subclass ``EncoderDecoderCacheManager``), forwarded with duck requests; ``manager_cls``
    picks the class."""

    def __init__(self, cache_size: int, manager_cls: Any):
        request_cls = release.import_module("vllm.v1.request").Request
        self.release = release.release()
        self.manager = manager_cls(cache_size=cache_size)
        self._request_cls = request_type(encoder_cache_compat.items_attribute(manager_cls),
                                         encoder_cache_compat.embeds_method(request_cls))
        self._requests: dict[ReqView, Any] = {}

    # The counters the machine reads are the manager's own attributes.
    @property
    def cache_size(self) -> int:
        return self.manager.cache_size

    @property
    def num_free_slots(self) -> int:
        return self.manager.num_free_slots

    def request(self, view: ReqView) -> Any:
        """The duck request for ``view`` (built once; ``ReqView`` is frozen and hashable)."""
        req = self._requests.get(view)
        if req is None:
            req = self._requests[view] = self._request_cls(view)
        return req

    # -- the port ------------------------------------------------------------------------------

    def check_and_update_cache(self, request: ReqView, input_id: int) -> bool:
        return self.manager.check_and_update_cache(self.request(request), input_id)

    def can_allocate(self, request: ReqView, input_id: int, encoder_compute_budget: int,
                     num_embeds_to_schedule: int) -> bool:
        return encoder_cache_compat.can_allocate(self.manager, self.request(request), input_id,
                                   encoder_compute_budget, num_embeds_to_schedule)

    def allocate(self, request: ReqView, input_id: int) -> None:
        self.manager.allocate(self.request(request), input_id)

    def free_encoder_input(self, request: ReqView, input_id: int) -> None:
        self.manager.free_encoder_input(self.request(request), input_id)

    def free(self, request: ReqView) -> None:
        self.manager.free(self.request(request))

    def get_freed_mm_hashes(self) -> list[str]:
        return list(self.manager.get_freed_mm_hashes())

    def get_cached_input_ids(self, request: ReqView) -> set[int]:
        # A copy: 0.33.0 returns its internal set, which the next call would change under us.
        return set(self.manager.get_cached_input_ids(self.request(request)))

    def reset(self) -> None:
        self.manager = encoder_cache_compat.reset(self.manager)


class VllmEncoderCache(VllmCacheManager):
    """``EncoderCachePort`` over a real ``vllm.v1.core.encoder_cache_manager`` manager."""

    def __init__(self, cache_size: int):
        module = release.import_module("vllm.v1.core.encoder_cache_manager")
        super().__init__(cache_size, module.EncoderCacheManager)

    @property
    def num_freeable_slots(self) -> int:
        return self.manager.num_freeable_slots

    def get_cached_num_encoder_embeds(self, request: ReqView, input_id: int) -> int | None:
        return encoder_cache_compat.cached_num_embeds(self.manager, self.request(request),
                                        request.mm_hash(input_id), input_id,
                                        request.num_embeds(input_id))

    def tracked_request_ids(self) -> set[str]:
        return encoder_cache_compat.tracked_request_ids(self.manager)

    def freeable_order(self) -> list[str]:
        """The unreferenced resident hashes, next to evict first (the manager's ``freeable``
        queue, every release): what a hunt re-synchronizes the model from after it accepts
        a divergence of the freeable count."""
        return list(self.manager.freeable)

    def __repr__(self) -> str:
        return f"VllmEncoderCache(vllm=={self.release}, cache_size={self.cache_size})"


def make_encoder_cache(cache_size: int) -> VllmEncoderCache:
    """The ``vllm`` target's encoder cache (``sim.targets`` routes here)."""
    return VllmEncoderCache(cache_size)
