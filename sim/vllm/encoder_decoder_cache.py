"""The ``vllm`` target's encoder-decoder cache: the installed vLLM's real
``EncoderDecoderCacheManager`` (Whisper and other encoder-decoder models schedule with it).

Same duck requests as the encoder cache's adapter (``sim/vllm/encoder_cache.py``): only the
request id, the items' hashes and their sizes. The manager keeps ``num_free_slots`` only; it
never calls its base class's ``__init__``, so ``num_freeable_slots`` and the base class's
queries (``get_cached_num_encoder_embeds``) do not exist on it and are not part of this port.
"""

from __future__ import annotations

from typing import Any

from models.encoder_cache_values import ReqView
from sim.vllm import compat, release
from sim.vllm.encoder_cache import request_type


class VllmEncoderDecoderCache:
    """``EncoderDecoderCachePort`` over a real ``EncoderDecoderCacheManager``."""

    def __init__(self, cache_size: int):
        module = release.import_module("vllm.v1.core.encoder_cache_manager")
        request_cls = release.import_module("vllm.v1.request").Request
        self.release = release.release()
        manager_cls = compat.encoder_decoder_manager_cls(module)
        self.manager = manager_cls(cache_size=cache_size)
        self._request_cls = request_type(compat.items_attribute(manager_cls),
                                         compat.embeds_method(request_cls))
        self._requests: dict[ReqView, Any] = {}

    @property
    def cache_size(self) -> int:
        return self.manager.cache_size

    @property
    def num_free_slots(self) -> int:
        return self.manager.num_free_slots

    def request(self, view: ReqView) -> Any:
        req = self._requests.get(view)
        if req is None:
            req = self._requests[view] = self._request_cls(view)
        return req

    # -- the port ------------------------------------------------------------------------------

    def check_and_update_cache(self, request: ReqView, input_id: int) -> bool:
        return self.manager.check_and_update_cache(self.request(request), input_id)

    def can_allocate(self, request: ReqView, input_id: int, encoder_compute_budget: int,
                     num_embeds_to_schedule: int) -> bool:
        return compat.can_allocate(self.manager, self.request(request), input_id,
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
        return set(self.manager.get_cached_input_ids(self.request(request)))

    def reset(self) -> None:
        self.manager = compat.reset(self.manager)

    def __repr__(self) -> str:
        return f"VllmEncoderDecoderCache(vllm=={self.release}, cache_size={self.cache_size})"


def make_encoder_decoder_cache(cache_size: int) -> VllmEncoderDecoderCache:
    """The ``vllm`` target's encoder-decoder cache (``sim.targets`` routes here)."""
    return VllmEncoderDecoderCache(cache_size)
