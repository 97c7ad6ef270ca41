"""Values of the prefix-caching KV block cache, shared by model, targets and reproducers.

A cached block's hash is named by what it hashes: the request's tokens from the first one to
the block's last (``BlockKey``), so a failure says which prefix a block was found under, and
a hash can be checked against the tokens its block holds. Targets translate their own hashes
(vLLM's chained sha256 values) into these keys.
"""

from __future__ import annotations

from attrs import frozen

BlockKey = tuple[int, ...]      # the tokens of the prefix a block hash names


@frozen
class PrefixRequest:
    """A request as the KV cache manager sees it: an id and its prompt's token ids. Tokens it
    samples later are appended by ``append_token_ids``."""

    request_id: str
    prompt: tuple[int, ...]


@frozen
class Hit:
    """``get_computed_blocks``' answer: the cached blocks of the request's longest hit, and
    the tokens they cover."""

    block_ids: tuple[int, ...] = ()
    num_computed_tokens: int = 0


@frozen
class BlockStored:
    """KV event: blocks cached, in table order (``keys``), after the block of ``parent``
    (None: from the prompt's start), holding ``token_ids``."""

    keys: tuple[BlockKey, ...]
    parent: BlockKey | None
    token_ids: tuple[int, ...]


@frozen
class BlockRemoved:
    """KV event: the block cached under ``key`` was evicted (its hash dropped)."""

    key: BlockKey


@frozen
class AllBlocksCleared:
    """KV event: the prefix cache was reset."""


Event = BlockStored | BlockRemoved | AllBlocksCleared

