"""Where the Mamba + MTP prefill stall occurs in the world vLLM builds, as a result record.

``python -m lch.mamba_mtp --record-dir results`` builds the hybrid world of
``fixtures/models/qwen3-next-mtp`` (``sim/vllm/hybrid_world.py``: every setting through vLLM's
config objects, the block size and the Mamba spec as vLLM computes them) at a few token
budgets, prefills prompts around the block size ``B`` vLLM chose, and records for every case
whether each request finished, or which computed-token count it stopped at (a pass that
schedules nothing, several in a row, with requests unfinished: the pass is deterministic, so
nothing changes after). Controls: the same cases on a checkpoint with one MTP module.

The cases: one request of ``B - 1`` ... ``2B + 2`` prompt tokens at each budget; and, at the
largest budget, a short request ahead of a ``B + 1``-token one, the short one's length
around ``budget - B`` (it leaves the long one a chunk ending exactly on the boundary).
The record (``results/findings/mamba-mtp.json``; ``mamba-mtp-X.json`` run under another vLLM X)
feeds ``docs/findings/mamba-mtp.md``.
"""

from __future__ import annotations

import argparse
import sys
import time

from fixtures.hybrid_models import QWEN3_NEXT_MTP
from lch import records

BUDGETS = (512, 1024, 2048)
MAX_NUM_SEQS = 8
NUM_SPECULATIVE_TOKENS = 2
MAX_PASSES = 64
COMMAND = "python -m lch.mamba_mtp --record-dir results"


def _case(hybrid, world, label: str, prompts: list[tuple[str, int]]) -> dict:
    sched = hybrid.HybridScheduler(world)
    for rid, n in prompts:
        sched.add_request(rid, n)
    passes = sched.run(MAX_PASSES)
    stalled = {rid: sched.computed(rid) for rid, _ in prompts if sched.computed(rid) is not None}
    return {"id": label, "budget": world.vllm_config.scheduler_config.max_num_batched_tokens,
            "prompts": dict(prompts), "outcome": "stalled" if stalled else "finished",
            "stalled_at": stalled, "passes": len(passes),
            "tokens_per_pass": [dict(p) for p in passes]}


def cases(hybrid, model_dir: str, tag: str) -> tuple[dict, list[dict]]:
    items = []
    facts = None
    for budget in BUDGETS:
        world = hybrid.build(model_dir, budget, MAX_NUM_SEQS, NUM_SPECULATIVE_TOKENS)
        facts = facts or world.facts()
        b = world.block_size
        for n in (b - 1, b, b + 1, b + 2, 2 * b, 2 * b + 1, 2 * b + 2):
            items.append(_case(hybrid, world, f"{tag}/budget{budget}/prompt{n}", [("r0", n)]))
    budget = BUDGETS[-1]
    world = hybrid.build(model_dir, budget, MAX_NUM_SEQS, NUM_SPECULATIVE_TOKENS)
    b = world.block_size
    for short in range(budget - b - 2, budget - b + 3):
        items.append(_case(hybrid, world, f"{tag}/budget{budget}/behind{short}",
                           [("r0", short), ("r1", b + 1)]))
    return facts, items


def measure() -> dict:
    from sim.vllm import hybrid_world, release
    started, start = records.now(), time.monotonic()
    facts, items = cases(hybrid_world, QWEN3_NEXT_MTP, "two-modules")
    one = hybrid_world.variant(QWEN3_NEXT_MTP, num_nextn_predict_layers=1)
    control_facts, control = cases(hybrid_world, one, "one-module")
    stalled = [i["id"] for i in items if i["outcome"] == "stalled"]
    summary = {"world": facts, "one_module_world": control_facts,
               "cases": len(items), "stalled": stalled,
               "control_cases": len(control),
               "control_stalled": [i["id"] for i in control if i["outcome"] == "stalled"]}
    # The default release's record is ``mamba-mtp``; another release's is named for it.
    found = release.release()
    name = "mamba-mtp" if found == release.DEFAULT_RELEASE else f"mamba-mtp-{found}"
    return records.envelope("findings", name, COMMAND,
                            vllm={"version": release.release()},
                            wall_s=time.monotonic() - start, summary=summary,
                            items=items + control, started=started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lch.mamba_mtp",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--record-dir", default="results",
                        help="write results/findings/mamba-mtp.json under this folder "
                             "(mamba-mtp-X.json for a vLLM X other than the default)")
    args = parser.parse_args(argv)
    record = measure()
    path = records.write(record, args.record_dir)
    print(f"{path}: {len(record['summary']['stalled'])} of {record['summary']['cases']} "
          f"cases stalled; one-module control: "
          f"{len(record['summary']['control_stalled'])} of "
          f"{record['summary']['control_cases']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
