"""Values of the tiered KV-offload lookup subsystem (frozen, hashable, pasteable reprs).

Keys are small integers (a request's block hashes, in order); adapters translate them into
whatever a target expects (vLLM: ``make_offload_key(hash_bytes, group_idx)``).
"""

from __future__ import annotations

import enum

from attrs import field, frozen


class LookupResult(enum.Enum):
    """What ``lookup(key)`` answers (vLLM PR #46363, ``vllm/v1/kv_offload/base.py``).

    HIT: readable in the primary tier. HIT_PENDING: present, a store or promotion into the
    primary is in flight. RETRY: an asynchronous probe of a secondary tier is unresolved.
    MISS: in no tier, the primary cannot take a promotion, or promotions are held.
    """

    MISS = 1
    HIT = 2
    HIT_PENDING = 3
    RETRY = 4

    def __repr__(self) -> str:          # pasteable: LookupResult.HIT
        return f"LookupResult.{self.name}"


@frozen
class StoreOutput:
    """``prepare_store``'s answer: the keys to store (absent ones, in order) and the keys
    evicted to make room (oldest first). Chunk ids are the target's business."""

    keys_to_store: tuple[int, ...]
    evicted_keys: tuple[int, ...]


@frozen
class OffloadEvent:
    """A primary-tier event from ``take_events()``: keys stored, or keys removed (evicted, or
    a failed store's chunks: reported only if the key is still absent when taken)."""

    keys: tuple[int, ...]
    removed: bool


@frozen
class Job:
    """An asynchronous transfer between the primary and a secondary tier.

    ``kind`` is "store" (primary -> secondary cascade, pins its primary chunks until polled)
    or "promote" (secondary -> primary, the primary chunks are write-pending until polled).
    Jobs are numbered from 0 in the order they are submitted.
    """

    job_id: int
    kind: str
    keys: tuple[int, ...]


@frozen
class Scan:
    """A connector lookup's result (hit count / window end index, None when deferred), the
    keys it looked up, in order, and what each lookup answered: two scans that return the
    same value may still differ in the lookups they made (and so in the promotions and probes
    they started)."""

    result: int | None
    lookups: tuple[int, ...]
    answers: tuple[LookupResult, ...]


@frozen(order=True)
class TierJob:
    """A job the tiering layer hands a secondary tier, as the tier sees it: ``kind`` "store"
    (a cascade, primary -> tier) or "promote" (tier -> primary), its keys and the request."""

    kind: str
    keys: tuple[int, ...]
    req: str


@frozen
class JobOutcome:
    """How the harness finishes a tier's job: whole, failed, or (a promotion) partly failed;
    ``ok_keys`` the keys copied, ``transfer_bytes`` what the tier reports moving (None: not
    reported)."""

    ok_keys: tuple[int, ...]
    success: bool
    transfer_bytes: int | None = None


@frozen
class TierSpec:
    """A secondary tier the harness plays: request-level (asks for whole requests) or
    chunk-level, polled off-step by the tier-poll thread or not, with a back-pressure detector
    or not, and the keys it holds from an earlier run."""

    name: str
    request_level: bool
    polled: bool
    detector: bool
    copies: frozenset[int] = field(factory=frozenset, converter=frozenset)
