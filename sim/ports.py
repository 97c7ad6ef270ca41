"""Ports: one Protocol per subsystem, with the real API's method names and shapes.

The reference model, the native implementation and the vLLM adapter each implement a port;
state machines and reproducers talk only to ports. Spellings follow vLLM 0.33.0.
"""

from __future__ import annotations

from typing import Protocol

from models.encoder_cache_values import ReqView


class EncoderCachePort(Protocol):
    """vLLM 0.33.0 ``EncoderCacheManager`` (``vllm/v1/core/encoder_cache_manager.py``)."""

    cache_size: int
    num_free_slots: int
    num_freeable_slots: int

    def check_and_update_cache(self, request: ReqView, input_id: int) -> bool: ...
    def can_allocate(self, request: ReqView, input_id: int, encoder_compute_budget: int,
                     num_embeds_to_schedule: int) -> bool: ...
    def allocate(self, request: ReqView, input_id: int) -> None: ...
    def free_encoder_input(self, request: ReqView, input_id: int) -> None: ...
    def free(self, request: ReqView) -> None: ...
    def get_freed_mm_hashes(self) -> list[str]: ...
    def get_cached_input_ids(self, request: ReqView) -> set[int]: ...
    def get_cached_num_encoder_embeds(self, request: ReqView, input_id: int) -> int | None: ...
    def reset(self) -> None: ...
