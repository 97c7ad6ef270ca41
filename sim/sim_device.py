"""A simulated CUDA device for CI: streams and events as queues, copies run when told to.

On CPU the GPU is simulated too (``docs/design.md``), so a missing event wait is an ordinary,
shrinkable failure on a machine without a GPU (FoundationDB's deterministic simulation, applied
to CUDA streams). No threads, no clock, no randomness of its own.

- A *stream* is a FIFO queue of ops. ``enqueue(stream, fn)`` queues ``fn`` (a copy or a
  compute kernel, a closure over CPU tensors); nothing runs until the device is told to.
- ``record(event, stream)`` marks the stream's last queued op, as ``cudaEventRecord`` does; a
  re-record moves the mark. ``wait_event(stream, event)`` queues a wait on the mark the event
  has *now* (``cudaStreamWaitEvent`` semantics): the stream's later ops run only after it.
- ``run(stream, count)`` runs ops from the head of one stream: the order the caller draws
  (the state machine's ``run_copies`` rule). ``host_sync(stream)`` and ``synchronize()`` run
  what the host must see, and nothing more: each runs the stream's queue in order and, for a
  wait, only the ops the waited-on mark needs. That is the laziest order the recorded waits
  allow, so a copy that nobody waits for stays pending as long as it legally can, and a tensor
  a pending copy writes is read with its old contents.

Every op runs exactly once, in an order consistent with each stream's FIFO and every wait
(waits refer only to ops queued earlier, so the order always exists). ``stats`` counts named
hazards: a copy that ran while an op queued before it on another stream was pending ("copy ran
out of order") and a host read while a side-stream copy was pending ("read while a copy was
pending").

Not modelled: timing, partial copies (a copy is atomic), host-side (pinned) memory semantics
beyond "a copy reads its source when it runs".
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable

from attrs import define, field, frozen

COMPUTE = "compute"
OUT_OF_ORDER = "copy ran out of order"
READ_WHILE_PENDING = "read while a copy was pending"


@frozen
class Mark:
    """An event's recorded position: every op of ``stream`` up to ``seq`` (0: none)."""

    stream: str
    seq: int


@define
class Op:
    seq: int                            # host order: the device-wide enqueue counter
    label: str
    fn: Callable[[], object] | None = None
    wait: Mark | None = None            # a wait op: runs once the mark is reached


@define
class SimEvent:
    mark: Mark | None = None            # never recorded: waits on it are no-ops (as in CUDA)


@define
class SimDevice:
    queues: dict[str, deque[Op]] = field(factory=lambda: {COMPUTE: deque()})
    stats: Counter = field(factory=Counter)
    ran: list[str] = field(factory=list)     # labels of the ops run, in order (a trace)
    _seq: int = 0
    _last: dict[str, int] = field(factory=dict)   # stream -> seq of its last queued op

    # -- the CUDA-like API ------------------------------------------------------------------

    def new_stream(self, name: str) -> str:
        if name in self.queues:
            raise ValueError(f"stream {name!r} exists; streams: {sorted(self.queues)}")
        self.queues[name] = deque()
        return name

    def enqueue(self, stream: str, fn: Callable[[], object], label: str) -> None:
        self._push(stream, Op(self._next_seq(), label, fn=fn))

    def record(self, event: SimEvent, stream: str) -> None:
        event.mark = Mark(stream, self._last.get(stream, 0))

    def wait_event(self, stream: str, event: SimEvent) -> None:
        if event.mark is not None and event.mark.stream != stream:   # same stream: FIFO
            self._push(stream, Op(self._next_seq(), f"wait {event.mark}", wait=event.mark))

    # -- who runs what, when ----------------------------------------------------------------

    def runnable(self) -> list[str]:
        """Streams whose head op can run now (in a stable order)."""
        return [s for s in sorted(self.queues) if self.queues[s] and self._ready(self.queues[s][0])]

    def pending_copies(self) -> list[str]:
        """Side streams (not compute) with a queued copy, whose head can run now."""
        return [s for s in self.runnable() if s != COMPUTE
                and any(op.fn is not None for op in self.queues[s])]

    def run(self, stream: str, count: int = 1) -> int:
        """Run up to ``count`` copies from the head of ``stream`` while its head can run
        (a wait whose event is reached passes for free); returns how many copies ran."""
        done, queue = 0, self.queues[stream]
        while done < count and queue and self._ready(queue[0]):
            done += queue[0].fn is not None
            self._run_head(stream)
        while queue and queue[0].wait is not None and self._ready(queue[0]):
            self._run_head(stream)            # leave the head a copy or a blocked wait
        return done

    def host_sync(self, stream: str = COMPUTE) -> None:
        """The host needs ``stream``'s results (a ``.tolist()``): run its whole queue, and of
        the other streams only what its waits need."""
        if self._pending_side_copy():
            self.stats[READ_WHILE_PENDING] += 1
        self._run_through(stream, self._last.get(stream, 0))

    def synchronize(self) -> None:
        """``torch.cuda.synchronize()``: every queue runs empty (host order among streams
        where the waits leave a choice)."""
        while any(self.queues.values()):
            heads = [(self.queues[s][0].seq, s) for s in self.runnable()]
            self._run_head(min(heads)[1])

    def pending(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def snapshot(self) -> tuple:
        """The queues and counters, for ``restore``: a look at what the device *will* hold
        (run everything, read, restore the tensors and this) observes without perturbing."""
        return ({s: deque(q) for s, q in self.queues.items()}, Counter(self.stats),
                len(self.ran), self._seq, dict(self._last))

    def restore(self, snapshot: tuple) -> None:
        queues, stats, ran, self._seq, self._last = snapshot
        self.queues, self.stats = queues, stats
        del self.ran[ran:]

    # -- internals ----------------------------------------------------------------------------

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _push(self, stream: str, op: Op) -> None:
        if stream not in self.queues:
            raise ValueError(f"unknown stream {stream!r}: create it with new_stream first")
        self.queues[stream].append(op)
        self._last[stream] = op.seq

    def _reached(self, mark: Mark) -> bool:
        queue = self.queues[mark.stream]
        return not queue or queue[0].seq > mark.seq

    def _ready(self, op: Op) -> bool:
        return op.wait is None or self._reached(op.wait)

    def _run_through(self, stream: str, seq: int) -> None:
        queue = self.queues[stream]
        while queue and queue[0].seq <= seq:
            op = queue[0]
            if op.wait is not None:          # run only what the waited-on mark needs
                self._run_through(op.wait.stream, op.wait.seq)
            self._run_head(stream)

    def _run_head(self, stream: str) -> None:
        op = self.queues[stream].popleft()
        assert self._ready(op), f"simulated device: {op.label} ran before its wait"
        if op.fn is not None:
            if stream != COMPUTE and any(q and q[0].seq < op.seq for q in self.queues.values()):
                self.stats[OUT_OF_ORDER] += 1
            op.fn()
            self.ran.append(op.label)

    def _pending_side_copy(self) -> bool:
        return any(op.fn is not None for s, q in self.queues.items() if s != COMPUTE
                   for op in q)
