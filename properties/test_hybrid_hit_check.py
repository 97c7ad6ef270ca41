"""``hit-is-longest-cached`` can fail, and the hit it expects (``longest_hit``) is read off the
cached set: pure values, no vLLM. ``properties/test_prefix_cache_mamba_world.py`` checks the
lookups of vLLM's real ``Scheduler``."""

from __future__ import annotations

import pytest

from models.prefix_cache_hybrid_hit import keeps_state_at, longest_hit, may_keep_state_at
from models.prefix_cache_values import Lookup
from properties.harness import PropertyFailed
from properties.hybrid_hit_check import (
    check_hit_blocks,
    check_kept_reachable,
    check_kept_state,
    check_lookup,
    check_state_computed,
    replay_boundary,
)

MAMBA, FULL = 0, 1
PREFIXES = ("a", "ab", "abc")
GROUPS = {"full_groups": (FULL,), "state_groups": (MAMBA,)}


def test_the_mamba_state_at_the_end_decides_and_a_gap_in_full_attention_stops():
    every_block = {(FULL, p) for p in PREFIXES}
    assert longest_hit(PREFIXES, every_block | {(MAMBA, "ab")}, cap_units=3, **GROUPS) == 2
    # a state past a full-attention gap serves nothing there
    gap = {(FULL, "a"), (FULL, "abc"), (MAMBA, "abc"), (MAMBA, "a")}
    assert longest_hit(PREFIXES, gap, cap_units=3, **GROUPS) == 1
    # the cap stops the hit short of a longer cached prefix
    assert longest_hit(PREFIXES, every_block | {(MAMBA, "abc"), (MAMBA, "a")},
                       cap_units=2, **GROUPS) == 1


def test_a_prefix_ending_inside_a_block_needs_that_block_cached_up_to_it_or_past():
    # units of a third of a block: "abcdef" is two blocks, "abcd" ends inside the second
    units = ("a", "ab", "abc", "abcd", "abcde", "abcdef")
    whole_first = {(FULL, "abc"), (MAMBA, "abcd")}
    assert longest_hit(units, whole_first, cap_units=6, units_per_block=3, **GROUPS) == 0
    assert longest_hit(units, whole_first | {(FULL, "abcd")}, cap_units=6,
                       units_per_block=3, **GROUPS) == 4
    # The second block cached further, or whole, holds "abcd" too: vLLM 0.33.0 served a
    # hit of 2880 tokens (blocks of 1152, keys of 576) with the third block cached whole
    # and no key of 2880 in full attention (a run of 300 examples of the Mamba world).
    for further in ("abcde", "abcdef"):
        assert longest_hit(units, whole_first | {(FULL, further)}, cap_units=6,
                           units_per_block=3, **GROUPS) == 4
    assert longest_hit(units, {(FULL, "abc"), (MAMBA, "ab")}, cap_units=6,
                       units_per_block=3, **GROUPS) == 2
    # a key of the next block holds nothing of this one
    assert longest_hit(units, {(FULL, "abcdef"), (MAMBA, "ab")}, cap_units=6,
                       units_per_block=3, **GROUPS) == 0


def test_a_hit_shorter_or_longer_than_the_pool_serves_fails():
    cached = frozenset({(FULL, "a"), (FULL, "ab"), (MAMBA, "ab")})
    check_lookup(Lookup("r1", PREFIXES, 3 * 4, cached, 8), 4, **GROUPS)     # holds
    for wrong in (0, 4, 12):
        with pytest.raises(PropertyFailed, match="hit-is-longest-cached: r1's lookup hit"):
            check_lookup(Lookup("r1", PREFIXES, 3 * 4, cached, wrong), 4, **GROUPS)


def test_a_kept_state_not_served_fails():
    units = ("a", "ab", "abc")
    # a 9-token prompt in units of 3: its boundary is 6 (the 9th token is never hit)
    assert replay_boundary(units, 9, 3) == 6 and replay_boundary(units[:1], 9, 3) == 3
    served = {(FULL, "a"), (FULL, "ab"), (MAMBA, "ab")}
    check_kept_state("r0", units, 6, served, 3, **GROUPS)
    with pytest.raises(PropertyFailed, match="kept-state-cached: r0's prompt chunk ended on "
                                             "6, .* served 0 tokens"):
        check_kept_state("r0", units, 6, served - {(MAMBA, "ab")}, 3, **GROUPS)


def test_the_states_kept_are_the_boundary_and_block_ends_as_retention_says():
    # blocks of 4, a replay boundary at 14
    assert keeps_state_at(14, 14, 4, 0) and not keeps_state_at(0, 0, 4, None)
    assert [p for p in range(15) if keeps_state_at(p, 14, 4, None)] == [4, 8, 12, 14]
    assert [p for p in range(15) if keeps_state_at(p, 14, 4, 8)] == [8, 14]
    assert [p for p in range(15) if keeps_state_at(p, 14, 4, 0)] == [14]


def test_hit_blocks_off_the_cached_ones_fail():
    # blocks of 4 tokens, keys per 2: "ab" ends inside block 0, "abcd" at its end
    units = ("ab", "abcd", "abcdef")
    caching = {(FULL, "abcd"): frozenset({5}), (FULL, "ab"): frozenset({6}),
               (MAMBA, "ab"): frozenset({7}), (MAMBA, "abcdef"): frozenset({8}),
               (FULL, "abcdef"): frozenset({9})}
    def lookup(hit, blocks):
        return Lookup("r1", units, 5, frozenset(caching), hit, blocks, caching)
    # a hit of 2 tokens may hold the whole block 5 or the partial block 6
    for full in (5, 6):
        check_hit_blocks(lookup(2, ((7,), (full,))), 4, unit=2, **GROUPS)
    check_hit_blocks(lookup(6, ((None, 8), (5, 9))), 4, unit=2, **GROUPS)
    for blocks in (((7,), (9,)), ((8,), (5,)), ((7, 8), (5,)), ((7,), ())):
        with pytest.raises(PropertyFailed, match="hit-blocks-cached: r1's hit of 2 tokens"):
            check_hit_blocks(lookup(2, blocks), 4, unit=2, **GROUPS)
    with pytest.raises(PropertyFailed, match="holds \\(5,\\) before its state's block"):
        check_hit_blocks(lookup(6, ((5, 8), (5, 9))), 4, unit=2, **GROUPS)


def test_no_hit_holds_no_block():
    check_hit_blocks(Lookup("r1", ("ab",), 1, frozenset(), 0, ((), ()), {}), 4, unit=2,
                     **GROUPS)
    with pytest.raises(PropertyFailed, match="group 1 holds 1 blocks for 0"):
        check_hit_blocks(Lookup("r1", ("ab",), 1, frozenset(), 0, ((), (5,)), {}), 4,
                         unit=2, **GROUPS)


def test_a_request_scheduled_on_a_state_cached_in_the_same_step_fails():
    hit = Lookup("r1", ("ab", "abcd"), 3, frozenset(), 2)
    check_state_computed(hit, {(MAMBA, "ab")}, True, state_groups=(MAMBA,), unit=2)
    check_state_computed(hit, set(), False, state_groups=(MAMBA,), unit=2)   # it waited
    with pytest.raises(PropertyFailed, match="state-computed-before-read: r1 was scheduled"):
        check_state_computed(hit, {(FULL, "ab")}, True, state_groups=(MAMBA,), unit=2)


def test_sparse_retention_may_keep_only_where_a_later_request_resumes():
    # blocks of 8, keys of 4, a prompt of 27 tokens: a repeat resumes at 24 (or a drafter's
    # one below, 16 or 20), an extension at 24 less one block or unit
    kept = [p for p in range(4, 33, 4) if may_keep_state_at(p, 27, 8, 4, 0)]
    assert kept == [16, 20, 24]
    assert [p for p in range(4, 33, 4) if may_keep_state_at(p, 27, 8, 4, 16)] == [16, 20, 24, 32]
    assert may_keep_state_at(8, 27, 8, 4, 0, junction=13)      # the junction's block end
    assert all(may_keep_state_at(p, 27, 8, 4, None) for p in range(4, 33, 4))   # dense


def test_a_state_kept_where_no_request_resumes_fails():
    check_kept_reachable("abcd", 24, [("r1", 27, 0)], 8, unit=4, retention_interval=0)
    with pytest.raises(PropertyFailed, match="kept-state-reachable: the pool keeps the Mamba "
                                             "state at abcd \\(8 tokens\\)"):
        check_kept_reachable("abcd", 8, [("r1", 27, 0), ("r2", 30, 0)], 8, unit=4,
                             retention_interval=0)
