"""The scheduler pass's mutation subject (its manifest names it; ``lch/suites.py`` gathers
every subsystem's into ``CLASSES``): vLLM's ``Scheduler`` on its encoder-input path."""

from __future__ import annotations


def subjects(Subject: type) -> dict:  # noqa: N803 - the class, passed in
    """``MODULE:CLASS`` -> Subject (built with ``lch.suites.Subject``, passed in: that module
    imports this one)."""
    return {
        # The Scheduler's encoder-input path: choosing a pass's encoder inputs (and the
        # disable_chunked_mm_input roll-back, the drafter's shift, the duplicate and
        # embed-count checks in it), allocating them, freeing an input once its tokens are
        # computed, and the encoder-cache reset. Left out: _get_encoder_input_updates (only
        # with the V2 model runner, which the offline Scheduler does not use),
        # _make_scheduled_encoder_input_stats (logging only), and schedule() /
        # _preempt_request / _free_request, mostly KV and queue bookkeeping whose encoder part
        # is one call to the manager's free().
        "vllm.v1.core.sched.scheduler:Scheduler": Subject(
            harness=("fixtures/reproducers/test_scheduler_pass_vllm_unchunked_item.py",
                     "properties/test_scheduler_pass_model.py",
                     "properties/test_scheduler_pass_drafter.py",
                     "properties/test_scheduler_pass_mamba.py",
                     "properties/test_scheduler_pass.py"),
            upstream=("tests/v1/core/test_scheduler.py",),
            support=("tests/v1/core/utils.py", "tests/v1/core/test_prefix_caching.py",
                     "tests/v1/kv_connector/unit/utils.py"),
            warm=("sim.vllm.scheduler_pass:warm",),
            methods=("_try_schedule_encoder_inputs", "_allocate_encoder_inputs",
                     "_reject_on_encoder_cache_embed_mismatch", "_free_encoder_inputs",
                     "_free_encoder_input", "reset_encoder_cache")),
    }
