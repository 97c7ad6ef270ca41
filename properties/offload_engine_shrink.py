"""Simpler worlds for the offload-engine minimizer (``properties/run.py:minimize``).

Actions are the machine's ``(name, *args)`` steps with the sequence's uid first. Each candidate
may fail the same way with a smaller or calmer program; the minimizer keeps those that do.
"""

from __future__ import annotations

from attrs import evolve

from properties.offload_engine_worlds import DELAY_CYCLES, OffloadWorld


def simpler_worlds(world: OffloadWorld, actions: list[tuple]):
    """Fewer layers, slots or CPU blocks, a smaller block, the longest delays, checks after
    every step, synchronous copies, dense uids, shorter prompts, no reuse, fewer chunks per
    prefill call, fewer copies run."""
    for name, low in (("num_layers", 1), ("num_slots", 1), ("num_cpu_blocks", 1)):
        if getattr(world, name) > low:
            yield evolve(world, **{name: getattr(world, name) - 1}), actions
    if world.block_size > 2:
        yield evolve(world, block_size=world.block_size // 2), actions
        # The same program at half scale: a filled block needs half the decodes, and a
        # prompt of whole blocks stays one (a smaller block alone often runs the pool dry).
        yield evolve(world, block_size=world.block_size // 2), [
            (n, a[0], -(-a[1] // 2), *a[2:]) if n == "add_request" else (n, *a)
            for n, *a in actions]
    # On a real GPU a race shows only while its copy still sleeps: the simpler world is the
    # one where every side stream sleeps longest (a replay then meets the race every time),
    # not one without delays, which a replay meets by the host's timing alone, or not.
    longest = tuple((name, max(DELAY_CYCLES)) for name, _ in world.copy_delay_cycles)
    if world.copy_delay_cycles and world.copy_delay_cycles != longest:
        yield evolve(world, copy_delay_cycles=longest), actions
    if not world.check_each_step:
        yield evolve(world, check_each_step=True), actions
    if world.async_mode:      # synchronous copies, and no step that runs pending copies
        yield evolve(world, async_mode=False, copy_delay_cycles=()), \
            [a for a in actions if a[0] != "run_copies"]
    added = [a[1] for a in actions if a[0] == "add_request"]
    dense = {uid: k for k, uid in enumerate(added)}
    if added != list(range(len(added))):
        yield world, [(n, dense.get(a[0], a[0]), *a[1:]) for n, *a in actions]
    for j, (name, *args) in enumerate(actions):
        simpler = []
        if name == "add_request":
            uid, prompt_len, max_new, reuse = args
            simpler += [(name, uid, p, max_new, reuse) for p in range(1, prompt_len)]
            # Not simpler alone, but a prompt one token longer can stand in for a preempt
            # and re-prefill (the minimizer pairs it with step deletions).
            simpler.append((name, uid, prompt_len + 1, max_new, reuse))
            if reuse:
                simpler.append((name, uid, prompt_len, max_new, False))
        elif name == "prefill" and args[1] > 1:
            simpler.append((name, args[0], args[1] - 1))
        elif name == "run_copies" and args[1] > 1:
            simpler.append((name, args[0], args[1] - 1))
        for action in simpler:
            yield world, [*actions[:j], action, *actions[j + 1:]]
