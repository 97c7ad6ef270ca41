"""``properties/mamba_holdings_check.py`` fails on the tables a wrong retirement leaves: a
passed state kept, a live state dropped (blocks of 4 tokens; None is the null block)."""

from __future__ import annotations

import pytest

from properties.harness import PropertyFailed
from properties.mamba_holdings_check import check_holdings


def test_a_table_holding_only_the_live_state_and_after_passes():
    check_holdings("r1", 1, (None, None, 7, 8, 9), 9, 4)      # state after 9 tokens: block 2
    check_holdings("r1", 1, (None, 7), 8, 4)                  # after 8: block 1, its last
    check_holdings("r1", 1, (5, 6), 0, 4)                     # nothing processed: no state
    check_holdings("r1", 1, (5,), 1, 4)


@pytest.mark.parametrize("table,processed", [((5, None, 7), 9), ((None, 6, 7, 8), 9),
                                             ((5, 6), 5)])
def test_a_passed_state_held_fails(table, processed):
    with pytest.raises(PropertyFailed, match="passed-states-retired: r1 had processed"):
        check_holdings("r1", 1, table, processed, 4)


@pytest.mark.parametrize("table,processed", [((None, None, None, 8), 9), ((None, None), 9),
                                             ((None,), 4)])
def test_a_live_state_dropped_fails(table, processed):
    with pytest.raises(PropertyFailed, match="live-state-held: r1 had processed"):
        check_holdings("r1", 1, table, processed, 4)
