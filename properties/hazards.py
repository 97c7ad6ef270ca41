"""Which hazards each machine must reach, and a seeded search that stops once it has.

A hazard is a branch a machine's generator exists to drive the target into (an eviction, a
pending hit, an id reused after finish, ...), marked with ``HarnessMachine.hazard``. A
machine that never reaches one checks nothing there. ``properties/test_hazards.py`` asks
that a seeded search reach each within its bound (``SEARCH_SEEDS`` runs of the machine's
examples per seed), stopping as soon as it has. How *often* each is reached moves with
Hypothesis's version and with any change to a machine's strategies (a hazard the search met
at example 540 at one commit may come at 200 at the next), so rates are measured and
recorded, never asserted: ``python -m lch.measure hazards`` writes every machine's under
``results/hazards/``.
"""

from __future__ import annotations

import importlib

from attrs import field, frozen
from hypothesis import settings

from properties.harness import HarnessMachine, PropertyFailed, Recorder
from properties.machines import MACHINES
from properties.run import run_machine

# Seeded streams, not one derandomized one: several streams measure a rate, one measures a
# path. SEEDS: those
# rates are measured over (``lch.measure hazards``' default); SEARCH_SEEDS: how far the
# reachability search may go. Every searched hazard came within the first three seeds
# (results/hazards/every-machine-hazards-seeds-0-2.json: the last at example 457 of 562,
# the encoder cache's reallocation in one pass); ten give room for a change of strategies
# or of Hypothesis that moves one later, and are spent only where a hazard is really lost.
SEEDS = (0, 1, 2)
SEARCH_SEEDS = tuple(range(10))


@frozen
class Reach:
    """A machine (``module:Class``) and the hazards its search must reach: all it declares
    unless ``only`` names some (a variant whose other hazards its parent reaches), less those
    in ``unreached``, each with the reason this machine cannot reach it."""
    machine: str
    examples_per_seed: int = 150
    only: tuple[str, ...] = ()
    unreached: dict[str, str] = field(factory=dict)

    @property
    def name(self) -> str:
        return self.machine.partition(":")[2]

    def load(self) -> type[HarnessMachine]:
        module, _, name = self.machine.partition(":")
        return getattr(importlib.import_module(module), name)

    def hazards(self) -> tuple[str, ...]:
        declared = self.load().HAZARDS
        return tuple(h for h in (self.only or declared) if h not in self.unreached)


SCHEDULER_PASS = "properties.scheduler_pass_machine"
TIERED_LOOKUP = "properties.tiered_lookup_machine"
PREFIX_CACHE = "properties.prefix_cache_machine"
# Hazards a main machine leaves to a further machine that reaches them: why, by hazard.
LEFT_TO = {f"{PREFIX_CACHE}:PrefixCacheMachine": dict.fromkeys(
    ("local groups: a prefix cached in one and not in another",
     "two windows: the hit cut by the second window",
     "two windows: a second round cut the hit"),
    "a hit in a hybrid world of several local groups or two windows (a few in a hundred of "
    "the main machine's worlds): HybridPrefixCacheMachine reaches it") | dict.fromkeys(
    ("two block sizes: the prompt's end keyed inside a full-attention block",
     "two block sizes: computed blocks left uncached past the alignment"),
    "a hybrid window world of two block sizes (one in about eighteen of the main machine's "
    "worlds): ScaledEagleHybridPrefixCacheMachine reaches it") | {
    "EAGLE: a hit read past by the drafter's window": "a hit in a hybrid world with the "
    "drafter in a window (one world in about seventy): EagleHybridPrefixCacheMachine "
    "reaches it",
    "DCP: a hit of the target's and the replicated draft's blocks": "the main machine "
    "draws no replicated draft (a further draw would shift its derandomized runs): "
    "DcpPrefixCacheMachine reaches it"}}
REACHES = [
    *(Reach(spec, unreached=LEFT_TO.get(spec, {})) for _, spec in sorted(MACHINES.items())),
    # The policy machines' larger worlds exist for their own hazards (``POLICY_HAZARDS``);
    # the mixed machine reaches the rest. Their programs are long (100 steps): 50 examples.
    Reach(f"{TIERED_LOOKUP}:TieredLookupLRUMachine", 50,
          ("policy: a request's positioned block evicted",)),
    Reach(f"{TIERED_LOOKUP}:TieredLookupARCMachine", 50,
          ("policy: ghost offered", "policy: eviction under an adapted target")),
    Reach(f"{TIERED_LOOKUP}:TieredLookupARCChurnMachine", 50,
          ("policy: ghost offered", "policy: eviction under an adapted target",
           "policy: an older ghost touched")),
    Reach(f"{SCHEDULER_PASS}:EncoderDecoderSchedulerPassMachine"),
    # The synchronous machine's worlds pipelined as vLLM's engine drives AsyncScheduler.
    Reach(f"{SCHEDULER_PASS}:AsyncSchedulerPassMachine", unreached={
        "preempted while holding an input": "a preemption needs the request to have no step "
        "in flight (mid-flight preemption is not modelled), and a pipelined request that "
        "holds an input almost always has one; the synchronous machine reaches it",
        "evicted then reallocated in one pass": "reached once in 900 examples: inputs stay "
        "held a step longer, so few entries are freeable when a pass evicts; the "
        "synchronous machine reaches it"}),
    Reach(f"{SCHEDULER_PASS}:MambaSchedulerPassMachine"),
    # The KV pool's own hazards; the synchronous machine reaches the rest.
    # The prefix cache's free-block queue on its own (prefix_cache.free_queue).
    Reach("properties.prefix_cache_queue_machine:FreeQueueMachine"),
    # The block pool on its own, beside a second pool (prefix_cache.block_pools).
    Reach("properties.prefix_cache_pools_machine:BlockPoolsMachine"),
    Reach(f"{SCHEDULER_PASS}:KvPressureSchedulerPassMachine", 150,
          ("preempted for KV blocks", "preempted itself for KV blocks",
           "waiting request held back for KV blocks",
           "preempted where admission takes a first chunk",
           "waiting request held back under a watermark")),
    Reach(f"{SCHEDULER_PASS}:PrefixKvSchedulerPassMachine", 150,
          ("prefix hit skipped an encoder input", "prefix hit on a free cached block")),
    # The prefix cache in hybrid worlds only.
    # 300 examples a seed: 'local groups: ...' is about one example in two hundred (first at
    # 277 on seed 0 once Gemma 4's worlds joined the draws).
    Reach(f"{PREFIX_CACHE}:HybridPrefixCacheMachine", 300, (
        "hybrid: the window's hit shorter than full attention's",
        "local groups: a prefix cached in one and not in another",
        "two windows: the hit cut by the second window",
        "two windows: a second round cut the hit",
        "chunked local: hit past the chunks before it"), unreached={
        "two windows: the hit cut by the second window": "rare in these worlds (0.1 per 100, "
        "first at example 1777 of 3108: results/hazards/prefix-cache-hybrid-hazards-seeds-"
        "0-3.json), past the search's 1500 once the probe step joined the rules: "
        "EagleHybridPrefixCacheMachine reaches it (0.6 per 100, first at example 340)",
        "two windows: a second round cut the hit": "not met by these random worlds "
        "(results/hazards/prefix-cache-hybrid-hazards-seeds-0-3.json): the first window must "
        "lack, at the length the second cut the hit to, a block it had at the longer one, "
        "which takes one exact eviction; the callers reach it, and a written-out scenario "
        "(test_prefix_cache_scenarios.py, 'searched_again') checks it on every target"}),
    # The prefix cache in hybrid window worlds with EAGLE's block drop only.
    Reach(f"{PREFIX_CACHE}:EagleHybridPrefixCacheMachine", 150, (
        "EAGLE dropped the last hit block",
        "EAGLE: a hit read past by the drafter's window",
        "hybrid: the window's hit shorter than full attention's",
        "two windows: the hit cut by the second window")),
    # The prefix cache in Gemma 4's layout with EAGLE's block drop only.
    # Hits among them (reachability only: with prompts measured in window blocks one
    # example in a thousand had one, and the search still reached it; the rates are in
    # results/hazards/prefix-cache-hybrid-scaled-eagle-*).
    Reach(f"{PREFIX_CACHE}:ScaledEagleHybridPrefixCacheMachine", 150, (
        "prefix hit",
        "preempted request rescheduled with a hit",
        "EAGLE dropped the last hit block",
        "EAGLE: a hit read past by the drafter's window",
        "hybrid: the window's hit shorter than full attention's",
        "two block sizes: the prompt's end keyed inside a full-attention block",
        "two block sizes: computed blocks left uncached past the alignment")),
    # The prefix cache decoded over two or four ranks only, prompts in whole blocks.
    Reach(f"{PREFIX_CACHE}:DcpPrefixCacheMachine", 150, (
        "prefix hit",
        "DCP: prefix hit of blocks spread over the ranks",
        "DCP: a prompt shares a cached block's first rank's tokens, not the whole block",
        "DCP: a hit of the target's and the replicated draft's blocks",
        "KV connector handed a finished request's blocks")),
]


def first_reached(machine: type[HarnessMachine], hazards: tuple[str, ...],
                  seeds: tuple[int, ...] = SEARCH_SEEDS, examples_per_seed: int = 150,
                  target: str = "native") -> dict[str, int]:
    """Each reached hazard -> the examples run, over ``seeds`` in order, up to and including
    the first that reached it (every example the machine began, those Hypothesis rejected
    too). The search stops as soon as every one of ``hazards`` is reached, so it costs what
    the rarest needs, at most ``seeds`` runs of ``examples_per_seed``."""
    first: dict[str, int] = {}
    done = 0
    profile = settings(settings.get_profile("ci"), derandomize=False,
                       max_examples=examples_per_seed, database=None)
    for seed in seeds:
        recorder = Recorder()

        def note(recorder: Recorder = recorder, done: int = done) -> bool:
            # Asked before each example: ``recorder.examples`` is then the number finished.
            for hazard in recorder.events:
                first.setdefault(hazard, done + recorder.examples)
            return set(hazards) <= set(first)

        recorder.stop = note
        result = run_machine(machine, target, profile, seed=seed, recorder=recorder,
                             shrink_program=False)
        if result.failure is not None:
            raise PropertyFailed(result.failure.property, result.failure.message)
        note()
        done += recorder.examples
        if set(hazards) <= set(first):
            break
    return first
