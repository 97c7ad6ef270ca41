"""The pytest plugin of ``tools/gpu_check.sh`` (``-p lch.gpu_check_plugin --gpu-check-tests
FILE``, or ``LCH_GPU_CHECK_TESTS=FILE``): one JSON line per test in FILE, with what the test
ran on, so the check's record can say it rather than assume it.

Per test it counts, as the test runs:

- ``offload_data``: the native offload engine's data planes built, by device and mode
  (``cuda/sync``, ``cuda/async``, ``cpu/async``...): a world on CPU in a CUDA step means the
  step did not select CUDA;
- ``streams``: their stream backends (``CudaStreams``, ``SimStreams``, ``SyncStreams``): a
  ``SimStreams`` means the simulated device caught what the step says delays caught;
- ``cuda_sleeps`` and ``sleep_cycles``: the ``torch.cuda._sleep`` calls queued before
  side-stream copies (the drawn delays), by length;

and adds every ``record_property`` of the test (vLLM's copy paths, for one). The counts are
taken in the process that runs the test (an xdist worker too) and written by the process
that reports it, so each test is one line whatever ``-n`` is. The wrappers only count: each
calls what it wraps.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

_TALLY: Counter = Counter()
_OPTION = "--gpu-check-tests"


def pytest_addoption(parser):
    parser.getgroup("llm-cache-harness").addoption(
        _OPTION, default=os.environ.get("LCH_GPU_CHECK_TESTS"), metavar="FILE",
        help="tools/gpu_check.sh: append one JSON line per test (outcome, what it ran on)")


def pytest_configure(config):
    config._gpu_check_file = config.getoption(_OPTION)
    _count_sleeps()
    _count_data_planes()


def _count_sleeps() -> None:
    """Count ``torch.cuda._sleep`` (``CudaStreams`` reads it when built, after this runs)."""
    try:
        import torch
    except ImportError:          # the step itself reports the missing torch
        return
    sleep = torch.cuda._sleep
    if getattr(sleep, "lch_counted", False):
        return

    def counted_sleep(cycles):
        _TALLY["cuda_sleeps"] += 1
        _TALLY[f"sleep_cycles/{cycles}"] += 1
        return sleep(cycles)
    counted_sleep.lch_counted = True
    torch.cuda._sleep = counted_sleep


def _count_data_planes() -> None:
    try:
        from sim.native.offload_engine.data import OffloadData
    except ImportError:          # no torch: nothing of the native engine runs either
        return
    init = OffloadData.__init__
    if getattr(init, "lch_counted", False):
        return

    def counted_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        mode = "async" if self.async_mode else "sync"
        _TALLY[f"offload_data/{self.device.type}/{mode}"] += 1
        _TALLY[f"streams/{type(self.streams).__name__}"] += 1
    counted_init.lch_counted = True
    OffloadData.__init__ = counted_init


def tally_of(counter: Counter) -> dict:
    """``{"offload_data": {"cuda/async": 3}, "cuda_sleeps": 7, ...}`` from the flat counts."""
    tally: dict = {}
    for key, count in sorted(counter.items()):
        group, _, rest = key.partition("/")
        if rest:
            tally.setdefault(group, {})[rest] = count
        else:
            tally[group] = count
    return tally


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    before = Counter(_TALLY)
    try:
        yield
    finally:
        delta = Counter(_TALLY)
        delta.subtract(before)
        delta = +delta
        if delta:
            item.user_properties.append(("gpu_check_tally", tally_of(delta)))


def pytest_runtest_logreport(report):
    """Written by the process that reports (the controller under xdist, which sees every
    worker's reports with their properties), once per test: its call, or its setup when the
    setup failed or skipped."""
    config = _CONFIG[0] if _CONFIG else None
    path = getattr(config, "_gpu_check_file", None)
    if not path or hasattr(config, "workerinput"):
        return
    if report.when != "call" and not (report.when == "setup" and not report.passed):
        return
    line = {"nodeid": report.nodeid, "outcome": report.outcome, "when": report.when,
            "duration_s": round(report.duration, 2)}
    for key, value in report.user_properties:
        line[key] = _jsonable(value)
    if not report.passed:
        line["message"] = _message(report)
    with open(path, "a") as handle:
        handle.write(json.dumps(line, sort_keys=True) + "\n")


_CONFIG: list = []


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _CONFIG[:] = [session.config]


def _message(report) -> str:
    """A skip's reason, or the first lines of a failure (the property and its reproducer)."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    text = getattr(report, "longreprtext", "") or str(report.longrepr)
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E ")]
    return "\n".join((errors or lines)[:30])


def _jsonable(value):
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value
