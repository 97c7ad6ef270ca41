"""The scheduler pass: one engine step on the encoder path, vLLM's ``Scheduler`` with the
worker's encoder cache (docs/specs/scheduler-pass.md)."""

from sim.manifests.subsystem import Column, Subsystem

SUBSYSTEM = Subsystem(
    name="scheduler_pass",
    rank=30,
    factories={"model": "sim.factories.scheduler_pass:make_model",
               "native": "sim.factories.scheduler_pass:make_native",
               "vllm": "sim.factories.scheduler_pass:make_vllm"},
    small_world=dict(cache_size=4, token_budget=4, encoder_compute_budget=4),
    port="sim.ports:SchedulerPassPort",
    machine="properties.scheduler_pass_machine:SchedulerPassMachine",
    worlds="properties.scheduler_pass_worlds",
    shrink="properties.scheduler_pass_shrink",
    bugs=("sched-read-ahead-ungated", "sched-budget-in-tokens", "sched-encode-embedless",
          "sched-preempt-keeps-inputs", "sched-reset-worker-kept", "sched-text-charged",
          "sched-mismatch-scheduled", "sched-mismatch-kept", "sched-ec-charged",
          "sched-ec-free-silent", "sched-encdec-reencode", "sched-encdec-held",
          "sched-async-free-early", "sched-mamba-mtp-stall", "sched-kv-preempts-self",
          "sched-kv-admits-chunk", "sched-prefix-ignores-mm"),
    catalogue="fixtures.catalogue.scheduler_pass",
    vllm_suites=("properties/test_scheduler_pass.py", "properties/test_scheduler_pass_model.py",
                 "properties/test_scheduler_pass_drafter.py",
                 "properties/test_scheduler_pass_mamba.py",
                 "properties/test_scheduler_pass_vllm_worlds.py",
                 "properties/test_hybrid_world.py",
                 "properties/test_scheduler_pass_promises.py",
                 "properties/test_scheduler_pass_kv.py"),
    # The KV-pressure traces and machines (with prefix caching and without) as a column of
    # their own: the encoder path's column keeps its suites, and this one is not hunted.
    history=(Column("scheduler_pass", ("properties/test_scheduler_pass.py",), hunted=True),
             Column("scheduler_pass_kv", ("properties/test_scheduler_pass_kv.py",))),
    mutation_subjects="lch.scheduler_pass_suites:subjects",
    # The KV-pressure traces and their machine: one file, in the machines tier.
    tests={"machines": ("properties/test_scheduler_pass_kv.py",)},
    spec_page="docs/specs/scheduler-pass.md",
    # Hunted too, each over worlds of its own (properties/test_scheduler_pass.py and
    # test_scheduler_pass_kv.py run them): an encoder-decoder model's, an async engine's, a
    # hybrid Mamba model's, and where the KV pool runs out, without prefix caching and with
    # it. (Not the Mamba-MTP machine: the catalogue's, on which vLLM 0.33.0 stalls.)
    machines={
        "encoder_decoder": "properties.scheduler_pass_machine:EncoderDecoderSchedulerPassMachine",
        "async_scheduling": "properties.scheduler_pass_machine:AsyncSchedulerPassMachine",
        "mamba": "properties.scheduler_pass_machine:MambaSchedulerPassMachine",
        "kv_pressure": "properties.scheduler_pass_machine:KvPressureSchedulerPassMachine",
        "prefix_kv": "properties.scheduler_pass_machine:PrefixKvSchedulerPassMachine"},
)
