"""The worlds and traces of ``properties/test_prefix_cache_mamba_world.py``: a hybrid
Qwen3-Next built as vLLM builds it (``sim/vllm/hybrid_world.py``), KV events on, a pool of 16
blocks, each run's token budget and Mamba state retention drawn, then requests over two
documents with steps and resets between them.

A module of its own, not the test's: a mutation campaign builds every world once in its
parent (``build_worlds``, the subject's ``warm``) without importing the test module there.
Hypothesis binds a ``@given`` test's settings when the module is imported, so a test module
imported before the campaign sets its profile (no shrinking: ``lch/suites.py``
``disable_minimizing``) would keep shrinking every failure it meets.
"""

from __future__ import annotations

from hypothesis import strategies as st

from fixtures.hybrid_models import QWEN3_NEXT_MTP
from properties.run import unavailable
from sim.errors import AdapterError, TargetUnavailable

POOL_BLOCKS = 16
BUDGETS = (4096, 2048)
RETENTIONS = (0, None, 2304)
UNITS = (None, 576, 288)              # prefix_match_unit: the block's (vLLM's own), or finer
DOCUMENTS = 2
BLOCK = 1152                  # the block vLLM computes for the world (the test checks it)
LONGEST_PROMPT = 4 * BLOCK + 600
SPECULATIVE_TOKENS = 2                # the MTP drafter's, per step


def world(budget: int, retention_interval: int | None, prefix_match_unit: int | None,
          async_scheduling: bool = False):
    from sim.vllm import hybrid_world
    try:
        return hybrid_world.build(QWEN3_NEXT_MTP, budget, 4, SPECULATIVE_TOKENS, kv_events=True,
                                  num_gpu_blocks=POOL_BLOCKS,
                                  retention_interval=retention_interval,
                                  prefix_match_unit=prefix_match_unit,
                                  async_scheduling=async_scheduling)
    except TargetUnavailable as why:
        if isinstance(why, AdapterError):
            raise
        unavailable("vllm", why)


def build_worlds() -> None:
    """Every world a run draws, built once (a mutation campaign's parent: ``lch/mutants.py``
    ``warm``; the children reuse them)."""
    for budget in BUDGETS:
        for retention_interval in RETENTIONS:
            for unit in UNITS:
                for async_scheduling in (False, True):
                    world(budget, retention_interval, unit, async_scheduling)


def document(n: int) -> list[int]:
    return [(n * 101 + i * 7) % 251 + 3 for i in range(LONGEST_PROMPT)]


def prompt_lengths():
    """Lengths around the world's block boundaries (the hashes reach two tokens past a block:
    the drafter's lookahead), and one well inside a block."""
    return st.builds(lambda blocks, off: max(1, blocks * BLOCK + off),
                     st.integers(0, 4), st.sampled_from((-1, 0, 1, 2, 3, 290, 600, 866)))


def acceptances():
    """Whether the MTP drafter runs, and if so how many of its drafts each step's verification
    accepts, step after step in a cycle (0 to all of the world's 2): None, no drafter."""
    return st.none() | st.lists(st.integers(0, SPECULATIVE_TOKENS), min_size=1, max_size=4)


def traces(full_reports: bool):
    """A world (token budget, retention, key unit), requests, each followed by some steps and
    perhaps a reset, the drafter's acceptances, and whether the engine schedules
    asynchronously (the last two drawn last: a derandomized run's earlier draws stay where
    they were before the drafter ran)."""
    request = st.tuples(st.integers(0, DOCUMENTS - 1), prompt_lengths(), st.integers(1, 3),
                        st.booleans() if full_reports else st.just(False),
                        st.integers(0, 4), st.sampled_from((False,) * 5 + (True,)))
    return st.tuples(st.sampled_from(BUDGETS), st.sampled_from(RETENTIONS),
                     st.sampled_from(UNITS), st.lists(request, min_size=1, max_size=6),
                     acceptances(), st.booleans())
