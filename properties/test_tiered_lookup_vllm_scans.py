"""The model's connector scans against vLLM's own ``_maximal_prefix_lookup`` and
``_sliding_window_lookup``, called unbound on a stub ``self`` over scripted answer sequences
(``specs/vllm-drive.md`` section 3): same result, same keys looked up, for any script.

Without vLLM the test skips with the install command; under ``LCH_REQUIRE_TARGETS=1``
(``nox -s vllm``) it fails instead.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.tiered_lookup_scans import maximal_prefix_lookup, sliding_window_lookup
from models.tiered_lookup_values import LookupResult
from sim.errors import TargetUnavailable
from sim.vllm import release
from sim.vllm.tiered_lookup import lookup_api


def vllm_scans():
    try:
        base = lookup_api()
        scheduler = release.import_module(
            "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler")
    except TargetUnavailable as why:
        if os.environ.get("LCH_REQUIRE_TARGETS"):
            pytest.fail(f"vllm is required here but unavailable: {why}")
        pytest.skip(str(why))
    return base, scheduler.OffloadingConnectorScheduler


scripts = st.lists(st.sampled_from(list(LookupResult)), max_size=8)


def run_vllm(scan: str, script: list[LookupResult], window: int, initial: int | None):
    base, ocs = vllm_scans()
    made: list[int] = []

    def lookup(key, ctx):
        made.append(key)
        return base.LookupResult[script[key].name]

    stub = SimpleNamespace(manager=SimpleNamespace(lookup=lookup),
                           _events_tracker=SimpleNamespace(record_lookup=lambda *a: None))
    ctx = base.ReqContext(req_id="r0")
    keys = list(range(len(script)))
    if scan == "prefix":
        result = ocs._maximal_prefix_lookup(stub, keys, ctx, None, None, 0)
    else:
        result = ocs._sliding_window_lookup(stub, keys, window, ctx, initial)
    return result, tuple(made)


@given(script=scripts)
def test_prefix_scan_agrees_with_vllm(script):
    got = maximal_prefix_lookup(lambda k: script[k], range(len(script)))
    assert (got.result, got.lookups) == run_vllm("prefix", script, 0, None)


@given(script=scripts, window=st.integers(1, 4), extra=st.sampled_from([None, 0, 1, 2]))
def test_window_scan_agrees_with_vllm(script, window, extra):
    initial = None if extra is None else window + extra
    got = sliding_window_lookup(lambda k: script[k], list(range(len(script))), window, initial)
    assert (got.result, got.lookups) == run_vllm("window", script, window, initial)
