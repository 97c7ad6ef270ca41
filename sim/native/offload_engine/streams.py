"""Where the offload data plane's copies run: three interchangeable stream backends.

- ``SyncStreams``: no streams; every op runs at once (the synchronous engine).
- ``SimStreams``: the simulated device of ``sim/sim_device.py`` on CPU; ops wait in queues and
  run when the state machine or a host read says so (the async mode in CI).
- ``CudaStreams``: real CUDA side streams and events; before each side-stream copy it may
  queue a ``torch.cuda._sleep`` of the cycles the run drew for that stream (delay injection:
  a missing wait loses the race on purpose). Only built when torch sees CUDA.

All three take the same calls: ``enqueue(stream, fn, label)``, ``record(event, stream)``,
``wait(stream, event)``, ``host_sync()`` (the host is about to read compute-stream results)
and ``synchronize()``. Stream handles are opaque; ``COMPUTE`` is the compute stream.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sim.sim_device import COMPUTE, SimDevice, SimEvent

SIDE_STREAMS = ("load", "store")


class SyncStreams:
    compute = COMPUTE
    simulated = False

    def stream(self, name: str) -> str:
        return name

    def event(self) -> None:
        return None

    def enqueue(self, stream, fn: Callable[[], object], label: str) -> None:
        fn()

    def record(self, event, stream) -> None:
        pass

    def wait(self, stream, event) -> None:
        pass

    def host_sync(self) -> None:
        pass

    def synchronize(self) -> None:
        pass


class SimStreams(SyncStreams):
    """Ops queue on the simulated device; ``device`` is exposed for the machine's rule."""

    simulated = True

    def __init__(self) -> None:
        self.device = SimDevice()

    def stream(self, name: str) -> str:
        return self.device.new_stream(name)

    def event(self) -> SimEvent:
        return SimEvent()

    def enqueue(self, stream, fn, label: str) -> None:
        self.device.enqueue(stream, fn, label)

    def record(self, event, stream) -> None:
        self.device.record(event, stream)

    def wait(self, stream, event) -> None:
        self.device.wait_event(stream, event)

    def host_sync(self) -> None:
        self.device.host_sync()

    def synchronize(self) -> None:
        self.device.synchronize()


def sleep_cycles(delays: Mapping[str, int], stream_name: str) -> int:
    """GPU cycles to sleep on ``stream_name`` before each of its copies (0: none). ``delays``
    is the run's plan, drawn once per run (``properties/offload_engine_worlds.py``); streams
    it does not name do not sleep, and a negative entry is refused."""
    cycles = delays.get(stream_name, 0)
    if not isinstance(cycles, int) or cycles < 0:
        raise ValueError(f"delay for stream {stream_name!r} must be an int >= 0, got {cycles!r}")
    return cycles


class CudaStreams:
    """Real CUDA streams and events, with the run's drawn delays on the side streams."""

    simulated = False

    def __init__(self, delays: Mapping[str, int] | None = None,
                 sleep: Callable[[int], None] | None = None) -> None:
        import torch
        self._torch = torch
        self.delays = dict(delays or {})
        self._sleep = sleep or torch.cuda._sleep      # injectable for the CPU unit test
        self.compute = None                            # None: the current stream
        self._names: dict[int, str] = {}

    def stream(self, name: str):
        stream = self._torch.cuda.Stream()
        self._names[id(stream)] = name
        return stream

    def event(self):
        return self._torch.cuda.Event()

    def enqueue(self, stream, fn, label: str) -> None:
        if stream is None:
            fn()
            return
        with self._torch.cuda.stream(stream):
            cycles = sleep_cycles(self.delays, self._names[id(stream)])
            if cycles:
                self._sleep(cycles)        # queued on the side stream, before the copy
            fn()

    def record(self, event, stream) -> None:
        event.record(stream or self._torch.cuda.current_stream())

    def wait(self, stream, event) -> None:
        (stream or self._torch.cuda.current_stream()).wait_event(event)

    def host_sync(self) -> None:
        pass                               # .tolist() on a CUDA tensor synchronizes

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()
