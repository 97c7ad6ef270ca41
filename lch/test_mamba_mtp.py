"""The Mamba + MTP campaign (``lch/mamba_mtp.py``) records a case as stalled exactly when a
request is left unfinished, with where it stopped, and covers the cases its docs name; run
on a stand-in for the hybrid world (the real one is ``properties/test_hybrid_world.py``'s)."""

from __future__ import annotations

from types import SimpleNamespace

from lch import mamba_mtp

BLOCK = 8


class FakeScheduler:
    """Prefills by the budget; a prompt of k*BLOCK + 1 tokens stops one short, forever (what
    the campaign must report as stalled)."""

    def __init__(self, world):
        self.budget, self.left = world.vllm_config.scheduler_config.max_num_batched_tokens, {}

    def add_request(self, rid, n):
        self.left[rid] = [0, n]

    def run(self, max_passes):
        passes = []
        for _ in range(max_passes):
            step, budget = {}, self.budget
            for rid, (done, n) in list(self.left.items()):
                end = n - 1 if n % BLOCK == 1 and n > BLOCK else n
                take = min(budget, end - done)
                if take:
                    step[rid], budget = take, budget - take
                    self.left[rid][0] += take
                if self.left[rid][0] == n:
                    del self.left[rid]
            passes.append(step)
            if not step:
                break
        return passes

    def computed(self, rid):
        return self.left[rid][0] if rid in self.left else None


def fake_hybrid():
    def build(model_dir, budget, seqs, spec):
        config = SimpleNamespace(scheduler_config=SimpleNamespace(
            max_num_batched_tokens=budget))
        return SimpleNamespace(vllm_config=config, block_size=BLOCK,
                               facts=lambda: {"block_size": BLOCK})
    return SimpleNamespace(build=build, HybridScheduler=FakeScheduler)


def test_a_request_left_unfinished_is_a_stall_and_says_where():
    facts, items = mamba_mtp.cases(fake_hybrid(), "model", "t")
    by_id = {i["id"]: i for i in items}
    assert facts == {"block_size": BLOCK}
    stalled = by_id[f"t/budget512/prompt{BLOCK + 1}"]
    assert stalled["outcome"] == "stalled" and stalled["stalled_at"] == {"r0": BLOCK}
    finished = by_id[f"t/budget512/prompt{BLOCK + 2}"]
    assert finished["outcome"] == "finished" and finished["stalled_at"] == {}
    # every budget's prompts around one and two blocks, and the requests behind another
    assert len(items) == 7 * len(mamba_mtp.BUDGETS) + 5
    assert sum(i["id"].startswith("t/budget2048/behind") for i in items) == 5
