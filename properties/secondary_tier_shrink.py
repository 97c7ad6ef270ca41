"""Minimizer candidates for the secondary-tier machine: a smaller primary, a world without
faults, a store or load deleted alone (later job positions shifted) or together with the run
of its job, fewer keys in a job."""

from __future__ import annotations

from attrs import evolve

from properties.secondary_tier_worlds import TierWorld


def simpler_worlds(world: TierWorld, actions: list[tuple]):
    if world.num_chunks > 2:
        yield evolve(world, num_chunks=world.num_chunks - 1), actions
    if world.faults:
        yield evolve(world, faults=False), actions
    for j, (name, *args) in enumerate(actions):
        if name not in ("submit_store", "submit_load"):
            continue
        keys, chunks = args
        # The job deleted alone: a later ``run_job`` draws a position among pending jobs,
        # so positions after it shift down by one.
        yield world, actions[:j] + [("run_job", max(0, a[1] - 1)) if a[0] == "run_job" else a
                                    for a in actions[j + 1:]]
        runs = [k for k in range(j + 1, len(actions)) if actions[k][0] == "run_job"]
        for k in runs[:1]:
            yield world, [a for i, a in enumerate(actions) if i not in (j, k)]
        if len(keys) > 1:
            for i in range(len(keys)):
                fewer = list(actions)
                fewer[j] = (name, keys[:i] + keys[i + 1:], chunks[:i] + chunks[i + 1:])
                yield world, fewer
