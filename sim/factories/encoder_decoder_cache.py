"""The encoder-decoder cache's target factories (``sim/manifests/encoder_decoder_cache.py``
names them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.targets import Target


def make_model(target: Target, cache_size: int) -> Any:
    from models.encoder_decoder_cache import EncoderDecoderCacheModel
    return EncoderDecoderCacheModel(cache_size)


def make_native(target: Target, cache_size: int) -> Any:
    from sim.native.encoder_decoder_cache import NativeEncoderDecoderCache
    return NativeEncoderDecoderCache(cache_size, bugs=target.bugs)


def make_vllm(target: Target, cache_size: int) -> Any:
    from sim.vllm.encoder_decoder_cache import make_encoder_decoder_cache
    return make_encoder_decoder_cache(cache_size)
