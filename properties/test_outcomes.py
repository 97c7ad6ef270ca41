"""Three outcomes, never confused: where an error arose decides whether it is a divergence
(a property failed against the model, or the implementation crashed on a valid call) or
``unavailable`` (the adapter could not drive the release). No vLLM needed: errors "inside
vLLM" come from code compiled under a ``site-packages/vllm/`` file name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import settings
from hypothesis.stateful import initialize, rule

from fixtures.pytest_plugin import Divergence, Unavailable, outcome_of
from properties.harness import HarnessMachine
from properties.run import run_machine
from sim import targets
from sim.errors import AdapterError, HarnessError
from sim.outcomes import classify, where_arose
from sim.vllm import compat


def in_vllm(source: str, name: str):
    """A function whose frames are vLLM's (a file under site-packages/vllm/)."""
    scope: dict = {}
    exec(compile(source, "/venv/lib/python3.11/site-packages/vllm/v1/fake.py", "exec"), scope)
    return scope[name]


def raised(call) -> BaseException:
    try:
        call()
    except Exception as error:  # noqa: BLE001
        return error
    raise AssertionError("expected an error")


# -- classify ---------------------------------------------------------------------------------


def test_an_error_inside_the_adapter_is_unavailable():
    error = raised(lambda: compat.store_output(object()))    # no such field: adapter code
    verdict = classify(error)
    assert verdict.kind == "unavailable"
    assert verdict.where.startswith("sim/vllm/compat.py:") and "store_output" in verdict.where


def test_a_wrong_call_shape_is_unavailable_even_when_the_callee_is_vllm():
    """``TypeError: got an unexpected keyword argument`` is raised at the adapter's call site;
    a TypeError or AttributeError inside vLLM's own code means the same: a call shaped for
    another release."""
    manager = in_vllm("class M:\n    def __init__(self, num_blocks): pass\n", "M")
    assert classify(raised(lambda: manager(num_chunks=4))).kind == "unavailable"
    reads = in_vllm("def f(budget):\n    return budget.largest_item\n", "f")
    verdict = classify(raised(lambda: reads(None)))
    assert verdict.kind == "unavailable" and "vllm/v1/fake.py" in verdict.where


def test_vllm_raising_on_a_valid_call_is_a_divergence():
    crash = in_vllm("def f(d, k):\n    assert k in d, 'not ready'\n", "f")
    assert classify(raised(lambda: crash({}, 1))).kind == "divergence"
    lookup = in_vllm("def f(d, k):\n    return d[k]\n", "f")
    assert classify(raised(lambda: lookup({}, 1))).kind == "divergence"


def test_a_property_assertion_is_a_divergence():
    def check():
        assert 1 == 2, "slots-agree: 1 != 2"
    assert classify(raised(check)).kind == "divergence"


def test_a_harness_error_outside_a_property_check_is_unavailable():
    assert classify(raised(lambda: {}["missing"])).kind == "unavailable"   # properties/ code


def test_library_frames_belong_to_their_caller():
    """numpy raising for the adapter is the adapter's error (the innermost frame of this
    repository or of vLLM decides)."""
    import numpy as np
    error = raised(lambda: compat.chunk_index(SimpleNamespace(chunk_id=np.array([1, 2]))))
    assert where_arose(error)[0] == "adapter"


# -- run_machine: an adapter error never comes back as a finding ------------------------------


class _Target:
    def __init__(self, op):
        self.op = op


class _Machine(HarnessMachine):
    op = staticmethod(lambda: None)

    @initialize()
    def setup(self):
        self.trace.world = "w"
        self.thing = _Target(self.op)

    @rule()
    def step(self):
        self.act("call")

    def do_call(self):
        self.thing.op()
        self.record_step("target.op()", None, "")


def machine_with(op) -> type:
    return type("_Machine", (_Machine,), {"op": staticmethod(op)})


FAST = settings(max_examples=5, stateful_step_count=3, database=None, deadline=None)


def test_an_adapter_error_mid_run_is_unavailable_with_the_call():
    def op():
        compat.store_output(object())
    with pytest.raises(AdapterError, match=r"failed in call\(\): AttributeError.*compat\.py"):
        run_machine(machine_with(op), "native", FAST)


def test_a_property_failure_mid_run_is_a_divergence():
    def op():
        raise AssertionError("events-agree: [] != [1]")
    result = run_machine(machine_with(op), "native", FAST)
    assert result.failure is not None and result.failure.property == "events-agree"


def test_vllm_crashing_mid_run_is_a_divergence():
    crash = in_vllm("def f():\n    raise KeyError('block')\n", "f")
    result = run_machine(machine_with(crash), "native", FAST)
    assert result.failure is not None and result.failure.property == "KeyError"


def test_building_a_vllm_target_that_raises_is_unavailable(monkeypatch):
    def factory(target, cache_size):
        in_vllm("def f(**kw):\n    raise TypeError('unexpected keyword num_chunks')\n", "f")(
            num_chunks=cache_size)
    monkeypatch.setitem(targets._FACTORIES, ("vllm", "encoder_cache"), factory)
    with pytest.raises(AdapterError, match="building the vllm encoder_cache .*TypeError"):
        targets.make("vllm", "encoder_cache", cache_size=2)
    assert issubclass(AdapterError, HarnessError)      # never a finding in run_machine


# -- the pytest plugin's record ---------------------------------------------------------------


def record(error: BaseException | None, **extra) -> dict:
    report = SimpleNamespace(nodeid="properties/test_x.py::test_y", duration=0.5,
                             user_properties=extra.get("props", []))
    return outcome_of(report, None if error is None else SimpleNamespace(value=error))


def test_records_name_the_outcome():
    assert record(None)["outcome"] == "pass"
    assert record(None, props=[("lch_missing", {"secondary tiers": 3})])["missing"] == \
        ["secondary tiers"]
    found = record(Divergence("slots-agree: ...", property="slots-agree", calls=4,
                              reproducer="r.py"))
    assert (found["outcome"], found["property"], found["calls"]) == ("divergence",
                                                                     "slots-agree", 4)
    assert record(Unavailable("target vllm ... unavailable"))["outcome"] == "unavailable"
    assert record(raised(lambda: compat.store_output(object())))["outcome"] == "unavailable"
    try:
        pytest.skip("absent: no kv_offload")
    except pytest.skip.Exception as skip:
        assert record(skip)["outcome"] == "absent"
