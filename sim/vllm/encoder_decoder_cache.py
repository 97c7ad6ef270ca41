"""The ``vllm`` target's encoder-decoder cache: the installed vLLM's real
``EncoderDecoderCacheManager`` (Whisper and other encoder-decoder models schedule with it).

Same duck requests as the encoder cache's adapter (``sim/vllm/encoder_cache.py``): only the
request id, the items' hashes and their sizes. The manager keeps ``num_free_slots`` only; it
never calls its base class's ``__init__``, so ``num_freeable_slots`` and the base class's
queries (``get_cached_num_encoder_embeds``) do not exist on it and are not part of this port.
"""

from __future__ import annotations

from sim.vllm import encoder_decoder_cache_compat, release
from sim.vllm.encoder_cache import VllmCacheManager


class VllmEncoderDecoderCache(VllmCacheManager):
    """``EncoderDecoderCachePort`` over a real ``EncoderDecoderCacheManager``: the encoder
    cache's calls but the queries its ``__init__`` never sets up."""

    def __init__(self, cache_size: int):
        module = release.import_module("vllm.v1.core.encoder_cache_manager")
        super().__init__(cache_size,
                         encoder_decoder_cache_compat.encoder_decoder_manager_cls(module))

    def __repr__(self) -> str:
        return f"VllmEncoderDecoderCache(vllm=={self.release}, cache_size={self.cache_size})"


def make_encoder_decoder_cache(cache_size: int) -> VllmEncoderDecoderCache:
    """The ``vllm`` target's encoder-decoder cache (``sim.targets`` routes here)."""
    return VllmEncoderDecoderCache(cache_size)
