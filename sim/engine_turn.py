"""One turn of the engine that drives a scheduler pass, shared by every scheduler-pass target.

The order is the engine's, not the scheduler's: a target that kept its own copy would drift
from the others the first time one changes. Without async scheduling a turn schedules a step,
runs it and applies its output. Under async scheduling (vLLM's ``AsyncScheduler``, driven
pipelined as its engine's batch queue of two does) a turn schedules and runs a step while a
request is open, and applies the oldest step in flight only once two are in flight, or once
no request is open (then nothing is scheduled and the turn's output is empty).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from models.scheduler_pass_values import Gathered, SchedulerOutputView, StepView


class _Pass(Protocol):
    def schedule(self) -> SchedulerOutputView: ...
    def execute_model(self, output: SchedulerOutputView) -> tuple[Gathered, ...]: ...


def engine_turn(port: _Pass, *, open_requests: bool, async_scheduling: bool,
                in_flight: Callable[[], int],
                apply_oldest: Callable[[], tuple[str, ...]]) -> StepView:
    """Schedule and run a step, then apply the oldest step in flight when the engine would:
    ``apply_oldest`` returns the requests it finished."""
    output, gathered = SchedulerOutputView({}, {}, ()), ()
    if open_requests or not async_scheduling:
        output = port.schedule()
        gathered = port.execute_model(output)
        if async_scheduling and in_flight() < 2:
            return StepView(output, gathered, ())
    if not in_flight():
        return StepView(output, gathered, ())
    return StepView(output, gathered, apply_oldest())
