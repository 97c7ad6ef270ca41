"""The ``vllm`` scheduler-pass target builds its worlds through vLLM's config objects, and
says which of their settings it could not (``outside_vllm``).

Without vLLM these skip; under ``LCH_REQUIRE_TARGETS=1`` (``nox -s vllm``) they fail instead.
"""

from __future__ import annotations

import pytest

from models.scheduler_pass_values import PlacedItem, SchedRequest
from properties.run import unavailable
from sim import targets
from sim.errors import AdapterError, CapabilityMissing, HarnessError, TargetUnavailable


def vllm_pass(**config):
    config = {"cache_size": 4, "token_budget": 8, "encoder_compute_budget": 4, **config}
    try:
        return targets.make("vllm", "scheduler_pass", **config)
    except TargetUnavailable as why:
        if isinstance(why, AdapterError):
            raise
        unavailable("vllm", why)


def test_a_small_token_budget_is_validated_with_a_max_num_seqs_it_allows():
    sched = vllm_pass(token_budget=3)
    config = sched.scheduler.scheduler_config
    assert (config.max_num_batched_tokens, config.max_num_seqs) == (3, 3)
    assert sched.scheduler.max_num_running_reqs == 3 == sched.max_num_seqs


def test_the_budget_once_assigned_after_validation_is_one_vllm_rejects():
    vllm_pass()       # vLLM importable, or skip
    from pydantic import ValidationError

    from sim.vllm import release
    config = release.import_module("vllm.config")
    with pytest.raises(ValidationError, match="greater than or equal to max_num_seqs"):
        config.SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=3, max_model_len=4096,
                               enable_chunked_prefill=True, is_encoder_decoder=False)


def test_the_chunked_input_switch_is_given_to_the_constructor():
    sched = vllm_pass(disable_chunked_mm_input=True)
    assert sched.scheduler.scheduler_config.disable_chunked_mm_input is True
    assert vllm_pass().scheduler.scheduler_config.disable_chunked_mm_input is False


def test_a_text_world_without_a_drafter_is_one_vllm_builds():
    sched = vllm_pass()
    sched.add_request(SchedRequest("r0", 4, 1))
    assert sched.outside_vllm == []


def test_settings_vllm_does_not_build_are_named():
    sched = vllm_pass(read_ahead=1)
    assert [r.split(" ")[0] for r in sched.outside_vllm] == ["drafter"]
    sched.add_request(SchedRequest("r0", 4, 1, (PlacedItem("img0", 0, 2),)))
    assert any(r.startswith("encoder compute budget 4 and cache 4 set on the built Scheduler")
               for r in sched.outside_vllm), sched.outside_vllm
    mamba = targets.make("vllm", "scheduler_pass", cache_size=4, token_budget=8,
                         encoder_compute_budget=4, mamba_block_size=4)
    if mamba.drives_mamba:
        assert any("hand-built MambaSpec of block size 4" in r for r in mamba.outside_vllm)


def test_more_open_requests_than_max_num_seqs_is_outside():
    sched = vllm_pass(token_budget=2)
    sched.add_request(SchedRequest("r0", 4, 1))
    sched.add_request(SchedRequest("r1", 4, 1))
    assert sched.outside_vllm == []
    sched.add_request(SchedRequest("r2", 4, 1))
    assert sched.outside_vllm and "max_num_seqs 2" in sched.outside_vllm[0]


def test_the_async_scheduler_is_named_in_the_scheduler_config():
    sched = vllm_pass(async_scheduling=True)
    if not sched.drives_async_scheduling:
        pytest.skip("absent: this release's AsyncScheduler is not the spec's")
    config = sched.scheduler.scheduler_config
    assert type(sched.scheduler).__name__ == "AsyncScheduler"
    assert config.get_scheduler_cls() is type(sched.scheduler)


def test_an_encoder_decoder_world_covers_max_model_len_with_its_budget():
    sched = vllm_pass(token_budget=6, cache_size=6, encoder_compute_budget=6,
                      encoder_decoder=True)
    if not sched.drives_encoder_decoder:
        pytest.skip(f"absent: {sched.why_no_encoder_decoder}")
    config = sched.scheduler.scheduler_config
    assert (config.max_num_batched_tokens, sched.scheduler.max_model_len) == (6, 6)
    assert not config.enable_chunked_prefill                     # vLLM turned it off
    with pytest.raises(HarnessError, match="exceed max_model_len 6"):
        sched.add_request(SchedRequest("r0", 4, 3, (PlacedItem("aud0", 0, 2),)))


def test_an_encoder_decoder_build_that_fails_is_unavailable_not_absent(monkeypatch):
    vllm_pass()
    from sim.vllm import scheduler_pass

    def broken(self, *args, **kwargs):
        raise RuntimeError("the processor could not be built")
    monkeypatch.setattr(scheduler_pass._StubAudioRegistry, "create_processor", broken)
    with pytest.raises(AdapterError, match="the processor could not be built"):
        targets.make("vllm", "scheduler_pass", cache_size=6, token_budget=6,
                     encoder_compute_budget=6, encoder_decoder=True)


def test_a_release_without_the_encoder_decoder_manager_is_absent(monkeypatch):
    vllm_pass()
    from sim.vllm import encoder_decoder_cache_compat

    def missing(module):
        raise CapabilityMissing("encoder-decoder cache: no EncoderDecoderCacheManager")
    monkeypatch.setattr(encoder_decoder_cache_compat, "encoder_decoder_manager_cls", missing)
    sched = targets.make("vllm", "scheduler_pass", cache_size=6, token_budget=6,
                         encoder_compute_budget=6, encoder_decoder=True)
    assert not sched.drives_encoder_decoder
    assert "no EncoderDecoderCacheManager" in sched.why_no_encoder_decoder
