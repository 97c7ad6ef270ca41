"""Checks of the tiered-lookup machine that no catalogue entry reaches, shown able to fail:
the machine run against the native target with one answer planted wrong."""

from __future__ import annotations

import pytest

from fixtures.pytest_plugin import Divergence
from properties.run import check_machine
from properties.tiered_lookup_machine import TieredLookupLRUMachine, TieredLookupMachine
from sim.native.tiered_lookup import NativeTieredLookup


def test_request_policy_agrees_can_fail(monkeypatch, tmp_path):
    # A manager whose on_new_request answers no offloading context (the connector would then
    # fail reading its policy).
    monkeypatch.setattr(NativeTieredLookup, "request_policy", lambda self: "none")
    with pytest.raises(Divergence) as failed:
        check_machine(TieredLookupLRUMachine, "native", str(tmp_path), max_examples=5)
    assert failed.value.info["property"] == "request-policy-agrees"
    assert failed.value.info["calls"] <= 1


def test_recency_order_agrees_can_fail(monkeypatch, tmp_path):
    # A primary that reports the recency of its evictable chunks only, as if a chunk a store
    # job or a load reads had none (its touches lost until it is unpinned).
    monkeypatch.setattr(NativeTieredLookup, "recency_order", NativeTieredLookup.eviction_order)
    with pytest.raises(Divergence) as failed:
        check_machine(TieredLookupMachine, "native", str(tmp_path), max_examples=50)
    assert failed.value.info["property"] == "recency-order-agrees"
