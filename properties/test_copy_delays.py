"""Delay injection on a real GPU, tested on CPU where possible: the drawing (per run, per side
stream: whether and how long it sleeps before each copy) and where the sleep goes (on the side
stream, before the copy, never on the compute stream). The sleep itself
(``torch.cuda._sleep``) only runs under ``tools/gpu_check.sh``.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given

from properties.offload_engine_worlds import DELAY_CYCLES, copy_delays, offload_worlds
from sim.native.offload_engine.streams import CudaStreams, sleep_cycles


@given(delays=copy_delays())
def test_a_run_draws_a_sleep_per_side_stream(delays):
    names = [name for name, _ in delays]
    assert names == sorted(set(names)) and set(names) <= {"load", "store"}
    assert all(cycles in DELAY_CYCLES and cycles > 0 for _, cycles in delays)


@given(world=offload_worlds(cuda=True))
def test_only_async_worlds_on_cuda_draw_delays(world):
    if not world.async_mode:
        assert world.copy_delay_cycles == ()
    assert ("copy_delay_cycles" in world.config()) == bool(world.copy_delay_cycles)


@given(world=offload_worlds(cuda=False))
def test_worlds_on_cpu_never_draw_delays(world):
    assert world.copy_delay_cycles == () and world.check_each_step


def test_the_minimizer_keeps_a_race_s_delays_at_their_longest():
    """Issue 25's GPU run: a slot-reuse race shrunk to a world without delays, whose reproducer
    then passed on the buggy engine (the host's timing alone had opened the window once). The
    minimizer now offers the longest sleep on every side stream instead of none, and a world
    that checked the CPU pool only at its end is offered checks after every step."""
    from properties.offload_engine_shrink import simpler_worlds
    from properties.offload_engine_worlds import OffloadWorld
    world = OffloadWorld(2, 1, 2, 2, async_mode=True, check_each_step=False,
                         copy_delay_cycles=(("load", 20_000), ("store", 200_000)))
    offered = [w for w, _ in simpler_worlds(world, [])]
    delays = {w.copy_delay_cycles for w in offered if w.async_mode}
    longest = max(DELAY_CYCLES)
    assert delays == {world.copy_delay_cycles, (("load", longest), ("store", longest))}
    assert any(w.check_each_step and w.copy_delay_cycles == world.copy_delay_cycles
               for w in offered)


def test_sleep_cycles_reads_the_plan():
    assert sleep_cycles({"load": 200_000}, "load") == 200_000
    assert sleep_cycles({"load": 200_000}, "store") == 0
    with pytest.raises(ValueError, match="int >= 0"):
        sleep_cycles({"store": -1}, "store")


def test_the_sleep_is_queued_on_the_side_stream_before_its_copy(monkeypatch):
    """Scenario (CPU, the CUDA calls stubbed): the load stream sleeps 20k cycles before each
    copy, the store stream not at all, the compute stream never."""
    log: list[str] = []
    streams = CudaStreams({"load": 20_000}, sleep=lambda cycles: log.append(f"sleep {cycles}"))
    monkeypatch.setattr(streams._torch.cuda, "Stream", lambda: object())
    monkeypatch.setattr(streams._torch.cuda, "stream", lambda s: contextlib.nullcontext())
    load, store = streams.stream("load"), streams.stream("store")
    streams.enqueue(load, lambda: log.append("load copy"), "load")
    streams.enqueue(store, lambda: log.append("store copy"), "store")
    streams.enqueue(streams.compute, lambda: log.append("compute"), "compute")
    assert log == ["sleep 20000", "load copy", "store copy", "compute"]
