"""The simulated CUDA device (``sim/sim_device.py``) keeps its promises.

Read like a trace: every copy is a closure that appends its label to a log, so a test can say
exactly what ran, and when. The last test is a property: for any program of copies, records
and waits on three streams, every run order the device allows respects every wait.
"""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from sim.sim_device import COMPUTE, OUT_OF_ORDER, READ_WHILE_PENDING, SimDevice, SimEvent


def device_with(*streams: str) -> SimDevice:
    dev = SimDevice()
    for name in streams:
        dev.new_stream(name)
    return dev


def test_a_copy_runs_only_when_the_device_is_told():
    """Scenario: a load is queued; the destination keeps its old contents until it runs."""
    dev, src, dst = device_with("load"), torch.tensor([7]), torch.tensor([0])
    dev.enqueue("load", lambda: dst.copy_(src), "load")
    assert dst.tolist() == [0]                  # pending: the old contents
    assert dev.pending_copies() == ["load"]
    assert dev.run("load") == 1                 # the machine's rule runs it
    assert dst.tolist() == [7]
    assert dev.pending() == 0


def test_a_copy_reads_its_source_when_it_runs_not_when_queued():
    """Scenario: a store queued, then the compute stream overwrites its source first."""
    dev, buf, cpu = device_with("store"), torch.tensor([1]), torch.tensor([0])
    dev.enqueue("store", lambda: cpu.copy_(buf), "store")
    dev.enqueue(COMPUTE, lambda: buf.fill_(2), "next write")
    dev.host_sync()                             # compute runs; the store is not needed
    assert cpu.tolist() == [0]
    dev.synchronize()
    assert cpu.tolist() == [2]                  # the race a missing wait allows


def test_host_sync_runs_only_what_the_waits_need():
    """Scenario: compute waits for a load; a store nobody waits for stays queued."""
    dev, log = device_with("load", "store"), []
    dev.enqueue("store", lambda: log.append("store"), "store")
    dev.enqueue("load", lambda: log.append("load"), "load")
    loaded = SimEvent()
    dev.record(loaded, "load")
    dev.wait_event(COMPUTE, loaded)
    dev.enqueue(COMPUTE, lambda: log.append("read"), "read")
    dev.host_sync()
    assert log == ["load", "read"]              # the store is still queued
    assert dev.stats[READ_WHILE_PENDING] == 1
    assert dev.stats[OUT_OF_ORDER] == 1         # the load overtook the older store
    dev.synchronize()
    assert log == ["load", "read", "store"]


def test_a_wait_uses_the_mark_the_event_had_when_waited_on():
    """Scenario: an event re-recorded after a wait does not move that wait (CUDA rules)."""
    dev, log = device_with("load"), []
    ev = SimEvent()
    dev.enqueue("load", lambda: log.append("first"), "first")
    dev.record(ev, "load")
    dev.wait_event(COMPUTE, ev)
    dev.enqueue("load", lambda: log.append("second"), "second")
    dev.record(ev, "load")                      # moves the event, not the queued wait
    dev.enqueue(COMPUTE, lambda: log.append("read"), "read")
    dev.host_sync()
    assert log == ["first", "read"]


def test_a_wait_on_an_unrecorded_event_is_a_no_op():
    dev, log = device_with("load"), []
    dev.wait_event(COMPUTE, SimEvent())
    dev.enqueue(COMPUTE, lambda: log.append("read"), "read")
    assert dev.runnable() == [COMPUTE]
    dev.host_sync()
    assert log == ["read"]


def test_a_blocked_stream_cannot_be_run_early():
    dev, log = device_with("load", "store"), []
    dev.enqueue("store", lambda: log.append("store"), "store")
    stored = SimEvent()
    dev.record(stored, "store")
    dev.wait_event("load", stored)
    dev.enqueue("load", lambda: log.append("load"), "load")
    assert dev.runnable() == ["store"]
    assert dev.run("load") == 0                  # its head waits for the store
    assert dev.run("store") == 1 and dev.run("load") == 1
    assert log == ["store", "load"]


def test_snapshot_and_restore_leave_the_queues_as_they_were():
    dev, log = device_with("store"), []
    dev.enqueue("store", lambda: log.append("store"), "store")
    state = dev.snapshot()
    dev.synchronize()
    dev.restore(state)
    assert dev.pending() == 1 and dev.ran == [] and not dev.stats


# -- property: any allowed order respects every wait ----------------------------------------

STREAMS = [COMPUTE, "load", "store"]
steps = st.lists(st.tuples(st.sampled_from(["copy", "record", "wait", "run", "sync"]),
                           st.sampled_from(STREAMS), st.integers(0, 2)), max_size=30)


@given(program=steps)
def test_every_run_order_respects_every_wait(program):
    dev, log = device_with("load", "store"), []
    events = [SimEvent() for _ in range(3)]
    must_follow: list[tuple[int, int]] = []          # (op before, op after) by copy number
    last_copy = {s: 0 for s in STREAMS}              # stream -> latest copy number queued
    gate = {s: 0 for s in STREAMS}                   # stream -> copies it must wait for
    marks = [0, 0, 0]                                # event -> copy number it marks
    n = 0
    for kind, stream, k in program:
        if kind == "copy":
            n += 1
            if gate[stream]:
                must_follow.append((gate[stream], n))
            dev.enqueue(stream, lambda n=n: log.append(n), f"copy {n}")
            last_copy[stream] = n
        elif kind == "record":
            dev.record(events[k], stream)
            marks[k] = last_copy[stream]
        elif kind == "wait" and events[k].mark is not None and events[k].mark.stream != stream:
            dev.wait_event(stream, events[k])
            gate[stream] = max(gate[stream], marks[k])
        elif kind == "run":
            dev.run(stream, k + 1)
        elif kind == "sync":
            dev.host_sync(stream)
    dev.synchronize()
    assert sorted(log) == list(range(1, n + 1))      # every copy ran exactly once
    position = {c: i for i, c in enumerate(log)}
    assert all(position[a] < position[b] for a, b in must_follow)
