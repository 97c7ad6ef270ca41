"""The pool's own promises (``properties/pool_checks.py``) can fail, each on the state that
breaks it: pure values, no vLLM."""

from __future__ import annotations

import pytest

from properties.harness import PropertyFailed
from properties.pool_checks import check_free, check_refs, check_reset


def test_a_reference_count_other_than_the_tables_holding_the_block_fails():
    check_refs({1: 2, 2: 0}, {1: 2})
    with pytest.raises(PropertyFailed, match=r"refs-agree: .*\{1: \(1, 2\)\}"):
        check_refs({1: 1, 2: 0}, {1: 2})


def test_a_free_queue_other_than_the_unreferenced_blocks_fails():
    check_free((2, 3), {1: 1, 2: 0, 3: 0})
    for free in ((2,), (2, 3, 1), (2, 3, 3)):
        with pytest.raises(PropertyFailed, match="free-is-unreferenced"):
            check_free(free, {1: 1, 2: 0, 3: 0})


def test_a_reset_answered_against_the_held_blocks_or_leaving_prefixes_fails():
    check_reset(True, [], set())
    check_reset(False, [4], {(0, "a")})
    for done, held, left in ((True, [4], set()), (False, [], set()), (True, [], {(0, "a")})):
        with pytest.raises(PropertyFailed, match="reset-agrees"):
            check_reset(done, held, left)
