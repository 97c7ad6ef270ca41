"""Why a suite failed on a mutant: the kill rules of a mutation campaign.

A failing test kills a mutant only for a reason the rule names, and every other failure is
an outcome of its own, never counted as a kill (``OUTCOMES``):

- **the harness's suites** (``harness_verdict``): ``killed`` when a declared property failed
  (a ``Divergence`` from ``properties.run.check_machine``, a ``PropertyFailed``, or a harness
  assertion whose message names a declared property: ``sim.outcomes.property_of``), or
  vLLM raised on a call the model accepts (``no-raise``, by ``sim.outcomes.classify``'s rule:
  outside a campaign a ``TypeError``/``AttributeError`` inside vLLM reads as a call shaped
  for another release; in one (``LCH_MUTANT`` set in the child) the unmutated class passed
  the same calls on the same release, so it is the mutant's). ``unavailable``: the adapter or the
  harness failed, the target could not be built (``Unavailable`` under
  ``LCH_REQUIRE_TARGETS``, ``HarnessError``), or Hypothesis refused the run (a health
  check). ``unnamed``: a test's bare ``assert`` failed, naming no declared property (the
  test should name what it checks).
- **vLLM's own tests** (``upstream_verdict``), in their own terms: ``killed`` when a test's
  assertion failed (``assert``, ``pytest.raises`` that saw nothing, ``pytest.fail``) or vLLM's
  code raised during the test (any error: vLLM's tests call it with this release's shapes);
  an error in a fixture, in collection, or raised by the test's own code outside vLLM is
  ``error``.
- Both: ``timeout`` (a test or the child ran past its CPU budget), ``crash`` (the child died
  without a result, ``lch.forked``), ``error`` (pytest could not run the suite).

``Verdicts`` is the pytest plugin that judges each failing test in the child: it stops the
run at the first kill (or timeout), and goes on past any other failure, so a mutant one test
cannot judge is still judged by the next.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

OUTCOMES = ("killed", "survived", "timeout", "crash", "unavailable", "unnamed", "error")
# Where vLLM's own test failed a kill: its own check, or vLLM raising inside it.
TEST_ASSERTION, VLLM_RAISED = "test-assertion", "vllm-raised"
MESSAGE_MAX = 300


def _line(text: str) -> str:
    lines = str(text).strip().splitlines()
    return lines[0][:MESSAGE_MAX] if lines else ""


def _timed_out(error: BaseException) -> bool:
    from lch.suites import OverBudget
    return isinstance(error, OverBudget)


def harness_verdict(report, excinfo) -> dict:
    """The outcome of one failing harness test: ``killed`` (with its ``property``),
    ``timeout``, ``unavailable``, ``unnamed`` or ``error``."""
    from hypothesis.errors import HypothesisException

    from fixtures.pytest_plugin import Divergence, Unavailable
    from properties.scenarios import declared_properties
    from sim.errors import HarnessError
    from sim.outcomes import NO_RAISE, classify, message_of, one_line, property_of, where_arose

    if report.when != "call":
        return {"outcome": "error", "message": f"the test's {report.when} failed: "
                f"{_line(report.longreprtext)}"}
    if excinfo is None:           # a strict xfail that passed: no error to name a property
        return {"outcome": "unnamed", "message": _line(report.longreprtext)}
    error = excinfo.value
    if _timed_out(error):
        return {"outcome": "timeout", "message": _line(error)}
    if isinstance(error, Divergence):
        prop = error.info["property"]
        if prop == NO_RAISE or prop in declared_properties():
            return {"outcome": "killed", "property": prop, "message": _line(error)}
        return {"outcome": "unnamed", "message": f"a machine failed on {prop!r}, no declared "
                f"property: {_line(error)}"}
    if isinstance(error, Unavailable):
        return {"outcome": "unavailable", "message": _line(error)}
    if isinstance(error, (HarnessError, HypothesisException)):
        return {"outcome": "unavailable", "message": one_line(error)}
    verdict = classify(error)
    if verdict.kind == "unavailable":
        return {"outcome": "unavailable", "message": f"{verdict.detail} (at {verdict.where})"}
    prop = property_of(error)
    if prop == NO_RAISE and where_arose(error)[0] in ("vllm", "native"):
        return {"outcome": "killed", "property": prop, "message": _line(message_of(error))}
    if prop != NO_RAISE and prop in declared_properties():
        return {"outcome": "killed", "property": prop, "message": _line(error)}
    if not isinstance(error, AssertionError):   # raised where neither vLLM nor a check is
        return {"outcome": "unavailable", "message": f"{verdict.detail} (at {verdict.where})"}
    return {"outcome": "unnamed", "message": f"{verdict.detail} (at {verdict.where}): "
            "the check names no declared property"}


def upstream_verdict(report, excinfo) -> dict:
    """The outcome of one failing test of vLLM's own: ``killed`` (``property`` says how: a
    test assertion, or vLLM raised), ``timeout`` or ``error``."""
    from sim.outcomes import one_line, where_arose

    if report.when != "call":
        return {"outcome": "error", "message": f"the test's {report.when} failed: "
                f"{_line(report.longreprtext)}"}
    if excinfo is None:
        return {"outcome": "unnamed", "message": _line(report.longreprtext)}
    error = excinfo.value
    if _timed_out(error):
        return {"outcome": "timeout", "message": _line(error)}
    area, where = where_arose(error)
    if area == "vllm":
        return {"outcome": "killed", "property": VLLM_RAISED,
                "message": f"{one_line(error)} (at {where})"}
    if isinstance(error, (AssertionError, pytest.fail.Exception)):
        return {"outcome": "killed", "property": TEST_ASSERTION, "message": one_line(error)}
    return {"outcome": "error", "message": f"the test's own code raised {one_line(error)} "
            f"(at {where}), neither an assertion nor vLLM"}


JUDGES: dict[str, Callable] = {"harness": harness_verdict, "upstream": upstream_verdict}


class Verdicts:
    """A pytest plugin that judges every failing test (``judge(report, excinfo)``), stops the
    session at the first kill or timeout and goes on past any other failure."""

    def __init__(self, judge: Callable) -> None:
        self.judge = judge
        self.failures: list[dict] = []
        self.passed = 0

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if report.failed:
            verdict = {"test": report.nodeid, **self.judge(report, call.excinfo)}
            self.failures.append(verdict)
            if verdict["outcome"] in ("killed", "timeout"):
                item.session.shouldfail = f"{verdict['outcome']}: {report.nodeid}"
        elif report.passed and report.when == "call":
            self.passed += 1
        return report

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.failures.append({"test": report.nodeid, "outcome": "error",
                                  "message": f"collection failed: "
                                             f"{_line(report.longreprtext)}"})

    def outcome(self, exit_code: int) -> dict:
        """The suite's outcome: its first kill; else the first failure's outcome (with the
        count of every outcome that failed a test, ``failures``); else ``survived`` when
        pytest ran the tests and all passed, ``error`` when it could not."""
        counts = dict(Counter(f["outcome"] for f in self.failures))
        kill = next((f for f in self.failures if f["outcome"] == "killed"), None)
        if kill is not None:
            return {**kill, "failures": counts, "passed": self.passed}
        if self.failures:
            return {**self.failures[0], "failures": counts, "passed": self.passed}
        if int(exit_code) == 0:
            return {"outcome": "survived", "test": "", "message": "", "passed": self.passed}
        return {"outcome": "error", "test": "", "passed": self.passed,
                "message": f"pytest exit code {int(exit_code)} with no failing test"}
