"""The model's connector scans against vLLM's own ``_maximal_prefix_lookup`` and
``_sliding_window_lookup``, called unbound on a stub ``self`` over scripted answer sequences
(``docs/specs/tiered-lookup.md``): same result, same keys looked up, for any script.

The script is written in the installed release's vocabulary
(``tiered_lookup_compat.scripted_answer``):
before 0.25.0 a lookup said True / False / None, so HIT_PENDING and RETRY were one answer
(None, "retry later") and the model scans the script with HIT_PENDING read as RETRY. Before
0.20.0 the connector had no scans of its own (it asked the manager for a prefix count,
which the tiered-lookup machine checks): the tests are ``absent`` there.

Without vLLM the test skips with the install command; under ``LCH_REQUIRE_TARGETS=1``
(``nox -s vllm``) it fails instead.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.tiered_lookup_scans import maximal_prefix_lookup, sliding_window_lookup
from models.tiered_lookup_values import LookupResult
from properties.run import unavailable
from sim.errors import CapabilityMissing, TargetUnavailable
from sim.vllm import tiered_lookup_compat


def vllm_scans():
    try:
        base = tiered_lookup_compat.offload_base()
        scans = tiered_lookup_compat.connector_scans()
    except CapabilityMissing as why:
        pytest.skip(f"absent: {why}")
    except TargetUnavailable as why:
        unavailable("vllm", why)
    if scans is None:
        pytest.skip(f"absent: the connector has no scans before {tiered_lookup_compat.SCANS_FROM}")
    return base, scans


scripts = st.lists(st.sampled_from(list(LookupResult)), max_size=8)


def in_release_vocabulary(base, script: list[LookupResult]) -> list[LookupResult]:
    """The script as the installed release can say it (HIT_PENDING is RETRY before 0.25)."""
    said = [tiered_lookup_compat.scripted_answer(base, r.name) for r in script]
    return [LookupResult[tiered_lookup_compat.lookup_answer(answer)] for answer in said]


def run_vllm(scan: str, script: list[LookupResult], window: int, initial: int | None):
    base, scans = vllm_scans()
    made: list[int] = []

    def lookup(key, ctx):
        made.append(key)
        return tiered_lookup_compat.scripted_answer(base, script[key].name)

    stub = SimpleNamespace(manager=SimpleNamespace(lookup=lookup),
                           _events_tracker=SimpleNamespace(record_lookup=lambda *a: None))
    ctx = tiered_lookup_compat.request_context(base, "r0")
    keys = list(range(len(script)))
    if scan == "prefix":
        result = tiered_lookup_compat.prefix_scan(scans, stub, keys, ctx)
    else:
        try:
            result = tiered_lookup_compat.window_scan(scans, stub, keys, window, ctx, initial)
        except CapabilityMissing:
            result = tiered_lookup_compat.window_scan(scans, stub, keys, window, ctx, None)
            initial = None
    return result, tuple(made), initial


@given(script=scripts)
def test_prefix_scan_agrees_with_vllm(script):
    base, _ = vllm_scans()
    script = in_release_vocabulary(base, script)
    got = maximal_prefix_lookup(lambda k: script[k], range(len(script)))
    result, made, _ = run_vllm("prefix", script, 0, None)
    assert (got.result, got.lookups) == (result, made), \
        f"scan-agrees: prefix over {script}: vLLM {(result, made)}, model {got}"


@given(script=scripts, window=st.integers(1, 4), extra=st.sampled_from([None, 0, 1, 2]))
def test_window_scan_agrees_with_vllm(script, window, extra):
    base, _ = vllm_scans()
    script = in_release_vocabulary(base, script)
    initial = None if extra is None else window + extra
    result, made, initial = run_vllm("window", script, window, initial)
    got = sliding_window_lookup(lambda k: script[k], list(range(len(script))), window, initial)
    assert (got.result, got.lookups) == (result, made), \
        f"scan-agrees: window {window} (initial {initial}) over {script}: vLLM " \
        f"{(result, made)}, model {got}"
