"""Generators create pressure: under the ``ci`` profile every named hazard of a machine is
reached, and often. A machine that never evicts checks nothing.

The rates are the share of examples (per 100) that reach each hazard, pinned well below what
was measured (see each entry) so the test flags a generator that lost its pressure, not noise.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from properties.harness import Recorder
from properties.machines import machine_for
from properties.prefix_cache_machine import MIN_RATE_PER_100 as PREFIX_CACHE_MIN_RATE_PER_100
from properties.run import run_machine

# subsystem -> {hazard: minimum share of examples that reach it, per 100}, pinned at about
# half of what was measured (native, seeds 0-2 x 150 examples, hypothesis 6.155.2). Counted
# per example (``Recorder.hazard`` counts an example once), so one noisy example cannot meet a
# rate. Measured, in the order listed: encoder_cache 9.4, 29.0, 33.2, 11.8, 1.6, 4.2, 23.3,
# 7.3, 12.7, 3.1, 22.7, 11.5, 2.1, 4.2 (issue 9: frees of unrecorded inputs, mid-pass resets
# and re-encoding after them; before it 7.9, 23.3, 25.7, 11.3, 2.3, 2.3, 19.3, 4.5);
# offload_engine (re-measured with async worlds on the simulated device and multi-step
# decodes, issue 11) 21.7, 16.6, 16.1, 9.1, 20.2, 23.4, 20.1, 11.6, 8.6, 18.7.
SEEDS = (0, 1, 2)
MIN_RATE_PER_100 = {
    "encoder_cache": {
        "can_allocate: evicts": 4.5,
        "can_allocate: no room": 14,
        "can_allocate: over compute budget": 16,
        "check_and_update_cache: freeable entry reused": 5.5,
        "evicted then reallocated in one pass": 0.7,
        "repeated item freed once": 2,
        "approval abandoned": 11,
        "get_freed_mm_hashes: reports evictions": 3.5,
        "free_encoder_input: input not recorded": 6,
        "free_encoder_input: entry evicted": 1.5,
        "get_cached_num_encoder_embeds: entry gone": 11,
        "reset: requests running": 5.5,
        "reset: evictions not yet reported": 1,
        "reset: a running request re-encodes its item": 2,
    },
    # encoder_decoder_cache measured: no room 29.8, over budget 38.9, abandoned 27.6, shared
    # hash 8.1, re-allocated 6.7, unheld input freed 46.4, idle request freed 52.3, reset 2.4.
    "encoder_decoder_cache": {
        "can_allocate: no room": 14,
        "can_allocate: over compute budget": 19,
        "approval abandoned": 13,
        "one hash encoded for two requests": 4,
        "allocated again after a free": 3.3,
        "free_encoder_input: input not held": 23,
        "free: request holds nothing": 26,
        "reset: requests running": 1.2,
    },
    "offload_engine": {
        "id reused after finish": 10.8,
        "decode filled a block": 8.3,
        "decode filled the prompt's partial block": 8,
        "decode read a decode-filled block": 4.5,
        "preempted then re-prefilled": 10.1,
        "prefill split across calls": 11.7,
        "pool exhausted": 10,
        "new decode owner after another": 5.8,
        "copy ran out of order": 4.3,
        "read while a copy was pending": 9.3,
    },
    # scheduler_pass measured (issue 8: masked items in a third of the worlds, preemption in
    # a third, resets of the encoder cache in a third), seeds 0-2 then 3-5: reallocated 1.2
    # and 0.7 (2.1 before: worlds that preempt or reset spend steps elsewhere and a reset
    # empties the cache), shared 35.7 / 26.3, cut 20.6 / 17.6, read-ahead read 17.2 / 14.9,
    # read-ahead cut 4.9 / 5.2, blocked 12.4 / 10.3, frees 30.0 / 23.2, aborted holding
    # 10.2 / 7.3, no embed in the window 2.3 / 1.4, masked item encoded 16.1 / 12.7,
    # preempted holding 4.6 / 3.1, preempted rescheduled 8.4 / 7.5, reset holding 6.4 / 4.7.
    # Issue 8 (a reused identifier in a quarter of the worlds, without read-ahead; text-only
    # templates in unmasked worlds), seeds 0-2 / 3-5: read-ahead read 9.1 / 12.6 and read-ahead
    # cut 1.9 / 1.6 (fewer worlds read ahead), refused for a reused identifier 7.5 / 8.4,
    # text-only beside multimodal 9.1 / 13.0; the new ones pinned at about a third.
    # Issue 9 (an encoder-cache connector holding some hashes in a third of the worlds, half
    # of those with the compute budget at the largest item), seeds 0-2 / 3-5: loaded 15.5 /
    # 11.6; the others stayed above their pins (reallocated 1.2 / 0.8, shared 26.9 / 19.7,
    # frees 21.8 / 17.2).
    # The drafter's window (vLLM 0.33.0's prefill lookahead: the encoder judges [c, c+w+s),
    # drafter worlds get s tokens more budget and prompt), seeds 0-2 / 3-5 in a fresh process:
    # no embed in the window 1.1 / 1.3 before, 0.6 / 1.2 after (0.5 for 0-2 inside the
    # test run): a window s tokens longer reaches an item's first embed more often, so fewer
    # items are only judged. Re-pinned from 0.6 to 0.3; sched-encode-embedless, the bug the
    # hazard exists for, is still caught within its catalogue bound. The others stayed above
    # their pins (read-ahead cut 4.1 / 2.1 -> 2.8 / 2.6).
    # The model restated as promises (its hazards read off its grants by the machine), seeds
    # 0-2 / 3-5: every one above its pin, none moved (python -m lch.measure hazards; records
    # results/hazards/scheduler-pass-hazards-seeds-0-2.json and -3-5.json, which also hold
    # the async, Mamba and encoder-decoder machines'; the lowest: shared 18.5, frees 16.6).
    "scheduler_pass": {
        "evicted then reallocated in one pass": 0.4,
        "item shared within a pass": 17,
        "tokens cut before an item": 8.8,
        "read-ahead past the scheduled range": 4.5,
        "read-ahead cut before an item": 0.8,
        "request blocked for a pass": 6.7,
        "pass frees hashes": 14,
        "aborted while holding an input": 3.5,
        "item with no embed in its window": 0.3,
        "masked item encoded": 6,
        "preempted while holding an input": 1.5,
        "preempted request rescheduled": 3.5,
        "encoder cache reset while requests hold inputs": 2.3,
        "request refused for a reused identifier": 2.5,
        "text-only request scheduled beside a multimodal one": 3,
        "input loaded through the EC connector": 4,
    },
    # secondary_tier measured (fs in three worlds of four, faults in three fs worlds of four):
    # store failed 9.2, skipped 7.6, missing file 34.5, short read 0.1, partial load 0.9,
    # file lost 5.2, stale HIT 0.7, probe dropped 6.2, deferred resolved 36.9. The short read
    # and the stale verdict need six to eight steps in order; pinned as "reached at all".
    # With every harness module loaded before the run (``conftest.py``: the same Hypothesis
    # constant pool in every process), the derandomized run reached skipped 3.3 and partial
    # load 0.3: pinned at half and as "reached at all".
    "secondary_tier": {
        "store failed: fault": 4.6,
        "store skipped: file exists": 1.6,
        "load failed: missing file": 17,
        "load failed: short read removed the file": 0.1,
        "load failed: keys loaded before the failure": 0.1,
        "file lost behind the tier": 2.6,
        "stale HIT verdict: file gone": 0.3,
        "probe answer dropped: request finished": 3,
        "deferred lookup resolved": 18,
    },
    # tiered_lookup measured (issue 9: the CPU manager alone evicting by LRU or ARC and
    # filtering stores in a third of its worlds; tier jobs failing on some keys, a rule for
    # failed promotions, secondary tiers preloaded with an earlier run's keys): evicts 7.5,
    # no room 18.5, failed store 14.1, HIT_PENDING 30.2, RETRY 18.5, promotion started 22.9,
    # promotion refused 6.6, scan pending 20.0, deferred resolved 35.1, promotions held 11.2,
    # store job failed 10.5, promote job failed 9.7.
    "tiered_lookup": {
        "prepare_store: evicts": 3.7,
        "prepare_store: no room": 9,
        "complete_store: failed store removed": 7,
        "lookup: HIT_PENDING": 15,
        "lookup: RETRY": 9,
        "promotion started": 11,
        "promotion refused: primary full": 3.3,
        "scan: pending block in the run": 10,
        "deferred lookup resolved": 17.5,
        "reset: promotions held": 5.6,
        "store job failed": 1,      # 10.5 here, 3.1 in a CI run (module constants differ)
        "promote job failed": 4.8,
    },
}

# The prefix cache keeps its pins beside its hazards (measured there).
MIN_RATE_PER_100["prefix_cache"] = PREFIX_CACHE_MIN_RATE_PER_100


@pytest.mark.parametrize("subsystem", sorted(MIN_RATE_PER_100))
def test_every_hazard_is_reached_often(subsystem):
    machine = machine_for(subsystem)
    assert set(MIN_RATE_PER_100[subsystem]) == set(machine.HAZARDS)
    # Three seeded streams, not one derandomized one: Hypothesis mixes in constants from the
    # local modules loaded so far, so a single stream depends on which tests ran before.
    recorder = Recorder()
    profile = settings(settings.get_profile("ci"), derandomize=False, max_examples=150)
    for seed in SEEDS:
        assert run_machine(machine, "native", profile, seed=seed, recorder=recorder).failure \
            is None
    examples = recorder.examples
    rates = {h: 100 * recorder.events[h] / examples for h in machine.HAZARDS}
    low = {h: round(r, 1) for h, r in rates.items() if r < MIN_RATE_PER_100[subsystem][h]}
    assert not low, f"hazards reached too rarely (per 100 examples): {low}; all: {rates}"


# The policy machines' own hazards (``POLICY_HAZARDS``): what their larger worlds exist to
# reach. Measured (native, seeds 0-2 / 3-5 / 6-7-8 x 50 examples, 100 steps): LRU's
# positioned block evicted 5.4, 12.1, 5.7; ARC's ghost offered 7.0, 12.3, 15.2 and eviction
# under an adapted target 2.2, 9.4, 3.0. Pinned at about half the lowest.
POLICY_MIN_RATE_PER_100 = {
    "TieredLookupLRUMachine": {"policy: a request's positioned block evicted": 2.5},
    # Issue 9's third round (thresholds of 3, peers without positions, finishes twice and
    # across resets in the worlds) moved ARC's: seeds 0-2 x 50 measured ghost offered 9.5
    # and adapted eviction 1.1 in the dev virtualenv (7.0 and 2.2 before), 2.8 and 0.6 in
    # nox's (Hypothesis's constant pool differs with the environment's modules); pinned
    # under the lower. ARC's ghost lists and target are now also checked after every step.
    "TieredLookupARCMachine": {"policy: ghost offered": 1.4,
                               "policy: eviction under an adapted target": 0.3},
    # Issue 9's fourth round: ARC under churn exists to reach the ghost lists' recency (a
    # touch of a ghost that is not its list's newest). Seeds 0-2 x 50: ghost offered 61.8,
    # 26.8, 31.8 (dev virtualenv) and 43.5, 28.9, 41.1 (nox's); adapted eviction 17.6, 9.8,
    # 1.5 and 24.2, 10.5, 3.6; an older ghost touched 10.3, 1.2, 1.5 and 4.8, 1.3, 1.8.
    # Pinned at about a third of the lower mean.
    "TieredLookupARCChurnMachine": {"policy: ghost offered": 12,
                                    "policy: eviction under an adapted target": 3,
                                    "policy: an older ghost touched": 0.9},
}


@pytest.mark.parametrize("name", sorted(POLICY_MIN_RATE_PER_100))
def test_policy_hazards_are_reached(name):
    from properties import tiered_lookup_machine
    machine = getattr(tiered_lookup_machine, name)
    recorder = Recorder()
    profile = settings(settings.get_profile("ci"), derandomize=False, max_examples=50)
    for seed in SEEDS:
        assert run_machine(machine, "native", profile, seed=seed, recorder=recorder).failure \
            is None
    rates = {h: 100 * recorder.events[h] / recorder.examples
             for h in POLICY_MIN_RATE_PER_100[name]}
    low = {h: round(r, 1) for h, r in rates.items() if r < POLICY_MIN_RATE_PER_100[name][h]}
    assert not low, f"policy hazards reached too rarely (per 100 examples): {low}"


# The encoder-decoder scheduler-pass machine's hazards (issue 9, Whisper-shaped worlds),
# measured native, seeds 0-2 / 3-5 x 150 examples: encoded whole at the start 48.2 / 50.0, a
# pass inside the input's span 25.4 / 28.2, blocked 29.1 / 29.7, frees 40.0 / 43.1, preempted
# rescheduled 5.1 / 10.2. Pinned at about a third of the lower.
ENCODER_DECODER_MIN_RATE_PER_100 = {
    "encoder-decoder input encoded whole at the start": 16,
    "encoder-decoder pass after the start, within the input's span": 8.5,
    "request blocked for a pass": 9.7,
    "pass frees hashes": 13,
    "preempted request rescheduled": 1.7,
}


def test_encoder_decoder_scheduler_pass_hazards_are_reached():
    from properties.scheduler_pass_machine import EncoderDecoderSchedulerPassMachine
    _assert_every_hazard_reached(EncoderDecoderSchedulerPassMachine,
                                 ENCODER_DECODER_MIN_RATE_PER_100)


def _assert_every_hazard_reached(machine, pins: dict[str, float],
                                 unreached: dict[str, str] | None = None) -> None:
    """A machine of its own (not a subsystem's): every hazard it declares is pinned above
    zero and reached at its pin's rate over seeds ``SEEDS`` x 150 native examples, or named
    in ``unreached`` with the reason this machine cannot reach it (a pin of 0 checks nothing,
    so none is allowed)."""
    unreached = unreached or {}
    assert set(pins) | set(unreached) == set(machine.HAZARDS) and not set(pins) & set(unreached)
    assert all(pin > 0 for pin in pins.values()), {h: p for h, p in pins.items() if p <= 0}
    recorder = Recorder()
    profile = settings(settings.get_profile("ci"), derandomize=False, max_examples=150)
    for seed in SEEDS:
        assert run_machine(machine, "native", profile, seed=seed, recorder=recorder).failure \
            is None
    rates = {h: 100 * recorder.events[h] / recorder.examples for h in pins}
    low = {h: round(r, 1) for h, r in rates.items() if r < pins[h]}
    assert not low, f"hazards reached too rarely (per 100 examples): {low}; all: {rates}"


# The async-scheduling scheduler-pass machine's hazards (the synchronous machine's worlds,
# pipelined as vLLM's engine drives AsyncScheduler), measured native, seeds 0-2 / 3-5 x 150
# examples: reallocated 0.1 / 0.0, shared 26.0 / 26.8, cut 14.7 / 15.0, read-ahead read
# 12.0 / 13.0, read-ahead cut 2.4 / 4.2, blocked 19.7 / 21.1, frees 20.8 / 22.3, aborted
# holding 13.8 / 20.7, no embed in the window 1.5 / 1.1, masked encoded 11.9 / 9.1, preempted
# holding 0.0 / 0.0, preempted rescheduled 1.6 / 3.5, reset holding 9.1 / 10.9, refused 6.8 /
# 6.5, text-only beside 6.8 / 9.7, loaded 10.0 / 11.6, held for a pending sample 18.6 / 27.3.
# Pinned at about half the lower; two are not reached by this machine (ASYNC_UNREACHED).
# The model restated as promises: held for a pending sample 12.1 / 16.9, now counted on the
# requests of the step's own update that stay open (a request the update finishes counted
# too before); the others above their pins; none moved
# (results/hazards/scheduler-pass-hazards-seeds-0-2.json and -3-5.json).
ASYNC_MIN_RATE_PER_100 = {
    "item shared within a pass": 13,
    "tokens cut before an item": 7.3,
    "read-ahead past the scheduled range": 6,
    "read-ahead cut before an item": 1.2,
    "request blocked for a pass": 9.8,
    "pass frees hashes": 10,
    "aborted while holding an input": 6.9,
    "item with no embed in its window": 0.5,
    "masked item encoded": 4.5,
    "preempted request rescheduled": 0.8,
    "encoder cache reset while requests hold inputs": 4.5,
    "request refused for a reused identifier": 3.2,
    "text-only request scheduled beside a multimodal one": 3.4,
    "input loaded through the EC connector": 5,
    "input held for a pending sample": 9.3,
}
# The synchronous machine reaches these (its own pins above); pipelined, they are out of
# reach, so this machine is not asked to.
ASYNC_UNREACHED = {
    "preempted while holding an input": "a preemption needs the request to have no step in "
    "flight (mid-flight preemption is not modelled), and a pipelined request that holds an "
    "input almost always has one",
    "evicted then reallocated in one pass": "reached once in 900 examples: inputs stay held "
    "a step longer, so few entries are freeable when a pass evicts",
}


def test_async_scheduler_pass_hazards_are_reached():
    from properties.scheduler_pass_machine import AsyncSchedulerPassMachine
    _assert_every_hazard_reached(AsyncSchedulerPassMachine, ASYNC_MIN_RATE_PER_100,
                                 ASYNC_UNREACHED)


# The hybrid Mamba scheduler-pass machine's hazards (the synchronous machine's worlds with
# chunks aligned to blocks; issue 9), measured native, seeds 0-2 / 3-5 x 150 examples:
# reallocated 0.8 / 1.1, shared 22.6 / 22.3, cut 17.3 / 10.4, read-ahead read 30.3 / 25.3,
# read-ahead cut 3.6 / 2.1, blocked 14.1 / 12.0, frees 23.8 / 17.8, aborted 14.2 / 6.6, no
# embed in the window 1.8 / 1.9, masked 11.1 / 9.9, preempted holding 2.9 / 6.4, preempted
# rescheduled 5.2 / 9.8, reset 6.4 / 5.6, refused 5.5 / 5.2, text-only 9.8 / 9.3, EC
# connector 14.3 / 12.1, no aligned chunk 3.4 / 1.7. Pinned at about a third of the lower.
# With the no-new-tokens shortcut removed on the native side (m1105's behaviour, emulated),
# the machine failed slots-agree in 3 of seeds 0-5 x 150 examples; the written-out scenario
# in properties/test_scheduler_pass_mamba.py kills it every time.
MAMBA_MIN_RATE_PER_100 = {
    "evicted then reallocated in one pass": 0.26,
    "item shared within a pass": 7.4,
    "tokens cut before an item": 3.4,
    "read-ahead past the scheduled range": 8.4,
    "read-ahead cut before an item": 0.7,
    "request blocked for a pass": 4,
    "pass frees hashes": 5.9,
    "aborted while holding an input": 2.2,
    "item with no embed in its window": 0.6,
    "masked item encoded": 3.3,
    "preempted while holding an input": 0.96,
    "preempted request rescheduled": 1.7,
    "encoder cache reset while requests hold inputs": 1.8,
    "request refused for a reused identifier": 1.7,
    "text-only request scheduled beside a multimodal one": 3.1,
    "input loaded through the EC connector": 4,
    "running request left no aligned chunk": 0.56,
}


def test_mamba_scheduler_pass_hazards_are_reached():
    from properties.scheduler_pass_machine import MambaSchedulerPassMachine
    _assert_every_hazard_reached(MambaSchedulerPassMachine, MAMBA_MIN_RATE_PER_100)
