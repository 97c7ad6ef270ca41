"""Release differences of vLLM's encoder-decoder cache manager
(``EncoderDecoderCacheManager``, the scheduling-only manager of encoder-decoder models).

Tagged as ``encoder_cache_compat``'s functions are (``# vLLM <version>:``); the class's calls
have the encoder cache manager's shapes, so only where it lives differs here.
"""

from __future__ import annotations

from typing import Any

from sim.errors import CapabilityMissing
from sim.vllm import release

# -- the encoder-decoder manager (vllm/v1/core/encoder_cache_manager.py, from 0.14.0) ---------

ENCODER_DECODER_FROM = "0.14.0"


def encoder_decoder_manager_cls(module: Any) -> type:
    """``EncoderDecoderCacheManager``, the scheduling-only manager of encoder-decoder models.

    # vLLM >=0.14.0: present (0.13.0 unread; absent from 0.12.0).
    #   0.14.0: ``get_freed_mm_hashes`` reports the pass's own allocations; no ``reset()``
    #   (``encoder_cache_compat.reset`` builds a fresh manager). 0.16.0 on: reported one pass
    #   later, and ``reset()``. Behaviour, not shape: the adapter calls both the same way.
    # vLLM 0.10.2-0.12.0: absent (``CapabilityMissing``: the machine reports ``absent``).
    """
    manager_cls = getattr(module, "EncoderDecoderCacheManager", None)
    if manager_cls is None:
        raise CapabilityMissing(
            f"encoder-decoder cache: vLLM {release.release()} has no EncoderDecoderCacheManager "
            f"(first shipped in {ENCODER_DECODER_FROM} or just before: 0.13.0 unread)")
    return manager_cls
