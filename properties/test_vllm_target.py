"""The ``vllm`` target's adapter: release handling, the duck request, and (when vLLM is
installed) the real ``EncoderCacheManager`` through the port.

Without vLLM (the default test run) the vLLM-backed tests skip with the reason and the
install command; under ``LCH_REQUIRE_TARGETS=1`` (``nox -s vllm``) they fail instead.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from models.encoder_cache_values import MmItem, ReqView
from properties.harness import PropertyFailed
from properties.hazards import SEEDS
from properties.run import unavailable
from properties.scenarios import agrees, holds
from sim import targets
from sim.errors import HarnessError, TargetUnavailable
from sim.vllm import encoder_cache_compat, release
from sim.vllm.encoder_cache import request_type

VLLM_INSTALLED = importlib.util.find_spec("vllm") is not None


def vllm_cache(cache_size: int):
    try:
        return targets.make("vllm", "encoder_cache", cache_size=cache_size)
    except TargetUnavailable as why:
        unavailable("vllm", why)


def req(rid: str, *items: tuple[str, int]) -> ReqView:
    return ReqView(rid, tuple(MmItem(h, n) for h, n in items))


# -- without vLLM ---------------------------------------------------------------------------


@pytest.mark.skipif(VLLM_INSTALLED, reason="vLLM is installed here")
def test_absent_vllm_is_unavailable_with_the_install_command():
    with pytest.raises(TargetUnavailable, match=r"not installed.*nox -s vllm.*requirements/"):
        targets.make("vllm", "encoder_cache", cache_size=4)


@pytest.mark.parametrize("found", ["0.10.1.1", "0.9.2", "0.8.5.post1"])
def test_releases_before_0_10_2_are_unsupported(found):
    with pytest.raises(HarnessError, match="not supported.*per request.*0.10.2 or later"):
        release.check_supported(found)


@pytest.mark.parametrize(("found", "family"), [("0.33.0", "vllm-0.33.txt"),
                                               ("0.34.1", "vllm-0.33.txt"),
                                               ("0.33.1rc1", "vllm-0.33.txt")])
def test_requirements_file_is_the_family_or_the_nearest_older(found, family):
    release.check_supported(found)
    assert release.requirements_file(found).name == family


@pytest.mark.parametrize(("attribute", "method"), [("mm_features", "get_num_encoder_embeds"),
                                                   ("mm_hashes", "get_num_encoder_tokens")])
def test_duck_request_exposes_exactly_what_the_manager_reads(attribute, method):
    duck = request_type(attribute, method)(req("r0", ("img0", 3), ("img1", 2)))
    assert duck.request_id == "r0" and getattr(duck, method)(1) == 2
    names = [f.identifier for f in duck.mm_features] if attribute == "mm_features" \
        else duck.mm_hashes
    assert names == ["img0", "img1"]
    other = "mm_hashes" if attribute == "mm_features" else "mm_features"
    with pytest.raises(AttributeError):
        getattr(duck, other)
    with pytest.raises(AttributeError):
        duck.prompt_token_ids = [1]        # nothing else can be read, or set


def test_reset_without_a_reset_method_makes_a_fresh_manager():
    class OldManager:                       # vLLM 0.10.2: no reset()
        def __init__(self, cache_size):
            self.cache_size, self.cached = cache_size, {"img0": {"r0"}}

    old = OldManager(cache_size=6)
    fresh = encoder_cache_compat.reset(old)
    assert fresh is not old and fresh.cache_size == 6


def test_a_missing_dependency_is_named_with_the_requirements_file():
    """A package vLLM imports is missing: ``check`` fails and names it and the file."""
    if not VLLM_INSTALLED:
        pytest.skip("needs vLLM installed to break one of its imports")
    script = ("import sys; sys.modules['msgspec'] = None\n"
              "from sim.vllm.release import check_imports; sys.exit(check_imports())")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"}, timeout=300)
    assert run.returncode == 1
    assert "'msgspec'" in run.stderr and "requirements/vllm-" in run.stderr, run.stderr


# -- with vLLM: the real EncoderCacheManager through the port -------------------------------


def test_vllm_encoder_cache_evicts_oldest_freeable_first():
    """Scenario (through the adapter):
    - a allocates img1, img2 (4 each) in a cache of 10; frees img1 -> freeable.
    - b allocates img3 (6): evicts img1, the only freeable entry; the pass reports it.
    - c hits img2, now held by a and c."""
    cache = vllm_cache(10)
    a, b, c = req("a", ("img1", 4), ("img2", 4)), req("b", ("img3", 6)), req("c", ("img2", 4))
    agrees("returns-agree", cache.check_and_update_cache(a, 0), False)
    agrees("returns-agree", cache.can_allocate(a, 0, encoder_compute_budget=100,
                                               num_embeds_to_schedule=0), True)
    cache.allocate(a, 0)
    agrees("returns-agree", cache.can_allocate(a, 1, 100, 0), True)
    cache.allocate(a, 1)
    cache.free_encoder_input(a, 0)                               # img1 -> freeable
    agrees("slots-agree", (cache.num_free_slots, cache.num_freeable_slots), (2, 6))
    agrees("returns-agree", cache.can_allocate(b, 0, 100, 0), True)    # evicts img1
    cache.allocate(b, 0)
    agrees("returns-agree", cache.get_freed_mm_hashes(), ["img1"])
    agrees("returns-agree", cache.get_freed_mm_hashes(), [])     # the list is cleared
    agrees("returns-agree", cache.check_and_update_cache(c, 0), True)  # hit: shared with a
    agrees("cached-inputs-agree", cache.get_cached_input_ids(c), {0})
    agrees("returns-agree", cache.get_cached_num_encoder_embeds(c, 0), 4)
    cache.reset()
    agrees("slots-agree", (cache.num_free_slots, cache.num_freeable_slots), (10, 10))


def test_vllm_target_runs_the_installed_release():
    cache = vllm_cache(4)
    assert release.parse_release(cache.release) >= release.MIN_RELEASE
    assert type(cache.manager).__module__ == "vllm.v1.core.encoder_cache_manager"


@pytest.mark.machines  # two machine runs of 450 examples: not this file's fast tier
def test_vllm_reaches_the_same_hazards_as_native():
    """Same seeds, same machine: against vLLM the encoder-cache machine reaches every hazard
    exactly as often as against native (they agree at every step, so the choices match)."""
    from hypothesis import settings

    from properties.encoder_cache_machine import EncoderCacheMachine
    from properties.harness import Recorder
    from properties.run import run_machine

    vllm_cache(1)                                   # skip (or fail) early without vLLM
    # The hazard rates' seeds and examples (properties/hazards.py): its rarest hazards fire in
    # about 1 example of 100, too few for a smaller run to reach every one whatever modules
    # the process loaded
    profile = settings(settings.get_profile("ci"), derandomize=False, max_examples=150)
    counts = {}
    for target in ("native", "vllm"):
        recorder = Recorder()
        for seed in SEEDS:
            failure = run_machine(EncoderCacheMachine, target, profile, seed=seed,
                                  recorder=recorder, shrink_program=False).failure
            if failure is not None and target == "vllm":    # the machine's test reports it
                pytest.skip(f"n/a: vLLM {release.release()} diverges ({failure.property}); "
                            "hazard counts compare only where the machine agrees")
            if failure is not None:                         # native broke a property
                raise PropertyFailed(failure.property, failure.message)
        counts[target] = (recorder.examples, recorder.steps, dict(recorder.events))
    holds("hazards-agree", counts["vllm"] == counts["native"],
          lambda: f"(examples, steps, hazards) against vllm {counts['vllm']}, against native "
                  f"{counts['native']}")
    holds("hazards-agree", set(counts["vllm"][2]) == set(EncoderCacheMachine.HAZARDS),
          lambda: f"hazards never reached: "                          # every hazard fired
                  f"{sorted(set(EncoderCacheMachine.HAZARDS) - set(counts['vllm'][2]))}")
