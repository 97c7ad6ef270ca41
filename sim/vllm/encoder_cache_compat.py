"""Release differences of vLLM's encoder cache manager (``EncoderCacheManager``) and the
request fields it reads, one small function each.

Every function is tagged with the releases it covers (``# vLLM <version>:``). Where a boundary
falls between releases we did not install, the function detects the feature on the installed
classes (a signature, a method the real ``Request`` offers) instead of trusting a version
table; the tag records what we saw (0.10.2, 0.20.0, 0.26.0, 0.33.0 installed and run; 0.11.0,
0.13.0, 0.22.0-0.32.0 read from the released wheels).
"""

from __future__ import annotations

import inspect
from typing import Any

# -- how a request names its items ------------------------------------------------------------


def items_attribute(manager_cls: type) -> str:
    """The request attribute the manager reads an item's hash from.

    # vLLM >=0.11.0: ``request.mm_features[i].identifier`` (PR #24548).
    # vLLM 0.10.2:   ``request.mm_hashes[i]``.
    """
    source = inspect.getsource(manager_cls)
    return "mm_features" if "mm_features[" in source else "mm_hashes"


def embeds_method(request_cls: type) -> str:
    """The request method the manager asks for an item's size.

    # vLLM >=0.13.0: ``get_num_encoder_embeds(i)`` (embeddings only, PR #30475; 0.12.0 unread).
    # vLLM 0.10.2-0.11.x: ``get_num_encoder_tokens(i)`` (the placeholder length; for the
    #   harness's items, which have no break tokens, the same number).
    """
    if hasattr(request_cls, "get_num_encoder_embeds"):
        return "get_num_encoder_embeds"
    return "get_num_encoder_tokens"


def counts_embeds(request_cls: type, placeholder_cls: type) -> bool:
    """Whether the release's encoder budget and cache count an item's embeddings (its
    ``is_embed`` positions), which the model's masked items need.

    # vLLM >=0.13.0: yes (``get_num_encoder_embeds``, PR #30475; the worker maps a token
    #   window to embed rows with ``PlaceholderRange.get_embeds_indices_in_range``).
    # vLLM 0.10.2-0.11.x: no: the placeholder's whole length is charged, break tokens
    #   included, by design then; worlds with masks are not run there (``absent``).
    """
    return (embeds_method(request_cls) == "get_num_encoder_embeds"
            and hasattr(placeholder_cls, "get_embeds_indices_in_range"))


def embeds_in_range(placeholder: Any, start: int, end: int) -> tuple[int, int]:
    """Rows of the item's encoder output that token positions ``[start, end)`` of its
    placeholder (relative) read, as the GPU model runner asks the range itself.

    # vLLM >=0.13.0: ``PlaceholderRange.get_embeds_indices_in_range(start, end)``.
    # vLLM 0.10.2-0.11.x: no such method; only unmasked items run there (``counts_embeds``),
    #   whose rows are the positions themselves.
    """
    method = getattr(placeholder, "get_embeds_indices_in_range", None)
    if method is not None:
        return method(start, end)
    assert placeholder.is_embed is None, "masked items need counts_embeds(): see there"
    return start, end


# -- calls whose shape changed ------------------------------------------------------------------


def make_manager(manager_cls: type, cache_size: int, vllm_config: Any) -> Any:
    """An encoder cache manager built the way the release's ``Scheduler`` builds it.

    # vLLM 0.33.0: ``Class.create_manager(cache_size=..., vllm_config=...)`` (the hook behind
    #   ``ec_manager_config``); detected, as the release that added it was not read.
    # Earlier: the constructor, ``Class(cache_size=...)``.
    """
    create = getattr(manager_cls, "create_manager", None)
    if create is None:
        return manager_cls(cache_size=cache_size)
    return create(cache_size=cache_size, vllm_config=vllm_config)


def can_allocate(manager: Any, request: Any, input_id: int, encoder_compute_budget: int,
                 num_embeds_to_schedule: int) -> bool:
    """``can_allocate``, whatever its fourth parameter is called.

    # vLLM >=0.13.0: (request, input_id, encoder_compute_budget, num_embeds_to_schedule).
    # vLLM 0.10.2-0.11.x: the same with ``num_tokens_to_schedule``: passed by position.
    # vLLM <0.10.2: (request, input_id) with a per-request cache: rejected by release.py.
    """
    return manager.can_allocate(request, input_id, encoder_compute_budget,
                                num_embeds_to_schedule)


def reset(manager: Any) -> Any:
    """Empty the cache; returns the manager to use from now on.

    # vLLM >=0.20.0 (added after 0.13.0): ``reset()`` (used when weights are updated).
    # vLLM 0.10.2-0.13.x: no ``reset()``; a fresh manager of the same size is the state ``reset()``
    #   later produces, so it stands in for it.
    """
    if hasattr(manager, "reset"):
        manager.reset()
        return manager
    return type(manager)(cache_size=manager.cache_size)


def cached_num_embeds(manager: Any, request: Any, mm_hash: str, input_id: int,
                      num_embeds: int) -> int | None:
    """``get_cached_num_encoder_embeds(request, i)``: the size stored for a resident item.

    # vLLM >=0.32.0: the manager keeps ``num_embeds_by_hash`` and answers itself.
    # vLLM <0.32.0 (no such method): resident in ``cached`` -> the item's own size, else None.
    """
    method = getattr(manager, "get_cached_num_encoder_embeds", None)
    if method is not None:
        return method(request, input_id)
    return num_embeds if mm_hash in manager.cached else None


# -- private state, read only where no public call shows it -----------------------------------


def tracked_request_ids(manager: Any) -> set[str]:
    """The request ids the manager keeps any state for (private fields).

    No public call tells an empty per-request record from a missing one, yet one left behind
    per finished request grows with every request a server ever sees.
    # vLLM 0.33.0: ``request_cached_ids`` and ``request_hash_refs`` (request id -> ...), and the
    #   holders in ``cached`` (hash -> request ids).
    # vLLM 0.10.2-0.22.0: only ``cached`` (no per-request maps).
    """
    tracked = {rid for holders in manager.cached.values() for rid in holders}
    for name in ("request_cached_ids", "request_hash_refs"):
        tracked.update(getattr(manager, name, {}))
    return tracked
