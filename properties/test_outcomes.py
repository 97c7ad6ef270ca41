"""Three outcomes, never confused: where an error arose decides whether it is a divergence
(a property failed against the model, or the implementation crashed on a valid call) or
``unavailable`` (the adapter could not drive the release). No vLLM needed: errors "inside
vLLM" come from code compiled under a ``site-packages/vllm/`` file name."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import settings
from hypothesis.stateful import initialize, rule

from fixtures.pytest_plugin import Divergence, Unavailable, outcome_of
from properties.harness import HarnessMachine
from properties.run import run_machine
from properties.scenarios import holds
from sim import targets
from sim.errors import AdapterError, HarnessError
from sim.outcomes import ROOT, classify, property_of, where_arose
from sim.vllm import tiered_lookup_compat


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
    # No such field: adapter code.
    error = raised(lambda: tiered_lookup_compat.store_output(object()))
    verdict = classify(error)
    assert verdict.kind == "unavailable"
    assert verdict.where.startswith("sim/vllm/tiered_lookup_compat.py:")
    assert "store_output" in verdict.where


def test_a_wrong_call_shape_is_unavailable_even_when_the_callee_is_vllm():
    """``TypeError: got an unexpected keyword argument`` is raised at the adapter's call site;
    a TypeError or AttributeError inside vLLM's own code means the same: a call shaped for
    another release."""
    manager = in_vllm("class M:\n    def __init__(self, num_blocks): pass\n", "M")
    assert classify(raised(lambda: manager(num_chunks=4))).kind == "unavailable"
    reads = in_vllm("def f(budget):\n    return budget.largest_item\n", "f")
    verdict = classify(raised(lambda: reads(None)))
    assert verdict.kind == "unavailable" and "vllm/v1/fake.py" in verdict.where


def test_a_shape_error_no_caller_can_cause_is_vllm_s_own():
    """A name vLLM's code never bound, or an attribute missing from the object whose method
    raised, is vLLM's fault whatever it was called with (a mutant deleting a line makes both);
    an attribute missing from an argument stays a possible call shape."""
    unbound = in_vllm("def f(d):\n    if d:\n        n = 1\n    return n\n", "f")
    verdict = classify(raised(lambda: unbound({})))
    assert verdict.kind == "divergence" and "never bound" in verdict.why
    undefined = in_vllm("def f():\n    return missing_name\n", "f")
    assert classify(raised(undefined)).kind == "divergence"
    cls = in_vllm("class M:\n    def __init__(self):\n        pass\n"
                  "    def free(self):\n        return self.num_free_slots\n", "M")
    verdict = classify(raised(lambda: cls().free()))
    assert verdict.kind == "divergence" and "its own object" in verdict.why
    on_argument = in_vllm("class M:\n    def take(self, budget):\n"
                          "        return budget.largest_item\n", "M")
    assert classify(raised(lambda: on_argument().take(object()))).kind == "unavailable"


def test_an_attribute_read_on_a_none_vllm_made_is_vllm_s_own():
    """A None that vLLM's own code produced (a local it bound, a field of its own ``self``)
    has no caller to blame: a mutant deleting the line that set it makes one. A None passed
    in, or read off an argument, is still a possible call shape."""
    local = in_vllm("def f(table, k):\n    state = table.get(k)\n    return state.rank\n", "f")
    verdict = classify(raised(lambda: local({}, 1)))
    assert verdict.kind == "divergence" and "the local 'state'" in verdict.why
    field = in_vllm("class S:\n    def __init__(self):\n        self.manager = None\n"
                    "    def step(self):\n        return self.manager.num_free()\n", "S")
    verdict = classify(raised(lambda: field().step()))
    assert verdict.kind == "divergence" and "its own field 'manager'" in verdict.why
    off_argument = in_vllm("def f(request):\n    return request.spec.block_size\n", "f")
    assert classify(raised(lambda: off_argument(SimpleNamespace(spec=None)))).kind \
        == "unavailable"


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
    chunk = SimpleNamespace(chunk_id=np.array([1, 2]))
    error = raised(lambda: tiered_lookup_compat.chunk_index(chunk))
    assert where_arose(error)[0] == "adapter"


# -- every layout a user has: a frame is placed by its module, not where its file resolves ---


def compiled(path: Path, module: str, source: str, name: str):
    """``name`` from ``source`` as if module ``module`` had been loaded from ``path``."""
    scope: dict = {"__name__": module}
    exec(compile(source, str(path), "exec"), scope)
    return scope[name]


RAISES = "def f():\n    raise KeyError('img0')\n"
MISSES = "def f(x):\n    return x.renamed_field\n"


@pytest.mark.parametrize("layout", ["plain install", "venv inside this checkout",
                                    "venv outside", "an editable checkout"])
def test_vllm_raising_is_vllm_s_in_every_layout(layout, tmp_path):
    where = {"plain install": Path("/usr/lib/python3/dist-packages/vllm/v1/fake.py"),
             "venv inside this checkout": ROOT / ".nox/vllm/lib/python3.11/site-packages"
                                                 "/vllm/v1/fake.py",
             "venv outside": tmp_path / "venv/lib/python3.11/site-packages/vllm/v1/fake.py",
             "an editable checkout": tmp_path / "src/vllm/vllm/v1/fake.py"}[layout]
    verdict = classify(raised(compiled(where, "vllm.v1.fake", RAISES, "f")))
    assert (verdict.kind, verdict.where) == ("divergence", "vllm/v1/fake.py:2 in f")
    assert property_of(raised(compiled(where, "vllm.v1.fake", RAISES, "f"))) == "no-raise"


def test_vllm_through_the_overlay_is_vllm_s(tmp_path, monkeypatch):
    """``--vllm-path``: the overlay's symlinks resolve into the user's checkout (outside this
    repository) or into the wheel (maybe inside it, under .nox/); both are vLLM."""
    checkout, overlay = tmp_path / "checkout", tmp_path / "overlay"
    mine = checkout / "vllm/v1/fake.py"
    mine.parent.mkdir(parents=True)
    mine.write_text(RAISES)
    link = overlay / "vllm/v1/fake.py"
    link.parent.mkdir(parents=True)
    link.symlink_to(mine)
    verdict = classify(raised(compiled(link, "vllm.v1.fake", RAISES, "f")))
    assert (verdict.kind, verdict.where) == ("divergence", "vllm/v1/fake.py:2 in f")


def test_a_library_in_a_venv_inside_this_checkout_is_not_the_harness():
    """hypothesis (or numpy) raising inside .nox/: the adapter that called it decides."""
    library = compiled(ROOT / ".nox/tests/lib/python3.11/site-packages/somelib/core.py",
                       "somelib.core", "def g():\n    raise ValueError('bad')\n", "g")
    adapter = compiled(ROOT / "sim/vllm/fake_adapter.py", "sim.vllm.fake_adapter",
                       "def h(g):\n    g()\n", "h")
    assert where_arose(raised(lambda: adapter(library)))[0] == "adapter"


def test_a_reproducer_imported_by_its_base_name_is_placed_by_its_path():
    test = compiled(ROOT / "fixtures/reproducers/test_x.py", "test_x",
                    "def t():\n    assert 1 == 2, 'slots-agree: 1 != 2'\n", "t")
    assert where_arose(raised(test))[0] == "harness"


def overlay_with_release(tmp_path, monkeypatch, release_text: str, mine_text: str):
    """A checkout file over a release's copy, as ``--vllm-path`` lays them out."""
    wheel, checkout = tmp_path / "wheel/vllm", tmp_path / "checkout"
    (wheel / "v1").mkdir(parents=True)
    (wheel / "v1/fake.py").write_text(release_text)
    mine = checkout / "vllm/v1/fake.py"
    mine.parent.mkdir(parents=True)
    mine.write_text(mine_text)
    root = tmp_path / "overlay"
    (root / "vllm/v1").mkdir(parents=True)
    (root / "vllm/v1/fake.py").symlink_to(mine)
    (root / "LCH_WHEEL").write_text(f"{wheel}\n")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("LCH_VLLM_PATH", str(checkout))
    return root / "vllm/v1/fake.py"


def test_a_shape_error_on_a_line_the_checkout_changed_is_the_checkout_s(tmp_path, monkeypatch):
    release = "def f(x):\n    return x.field\n"
    path = overlay_with_release(tmp_path, monkeypatch, release, MISSES)
    verdict = classify(raised(lambda: compiled(path, "vllm.v1.fake", MISSES, "f")(object())))
    assert verdict.kind == "divergence" and "a line your checkout changed" in verdict.why


def test_a_shape_error_on_the_release_s_own_line_stays_unavailable(tmp_path, monkeypatch):
    path = overlay_with_release(tmp_path, monkeypatch, MISSES, "# a comment\n" + MISSES)
    source = "# a comment\n" + MISSES
    verdict = classify(raised(lambda: compiled(path, "vllm.v1.fake", source, "f")(object())))
    assert verdict.kind == "unavailable"        # line 3 is the release's line 2, unchanged


def test_the_commit_of_a_checkout_outside_git_is_none(tmp_path):
    from sim.vllm.overlay import commit_text, git_commit
    assert git_commit(tmp_path) is None
    assert commit_text({"commit": None, "git": False}) == "not a git checkout: no commit"
    assert commit_text({"commit": "abc123", "git": True}) == "commit abc123"


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
        self.record_step("target.op()", None, "")     # before the call, as every machine does
        self.thing.op()


def machine_with(op) -> type:
    return type("_Machine", (_Machine,), {"op": staticmethod(op)})


FAST = settings(max_examples=5, stateful_step_count=3, database=None, deadline=None)


def test_an_adapter_error_mid_run_is_unavailable_with_the_call():
    def op():
        tiered_lookup_compat.store_output(object())
    with pytest.raises(AdapterError,
                       match=r"failed in call\(\): AttributeError.*tiered_lookup_compat\.py"):
        run_machine(machine_with(op), "native", FAST)


def test_a_property_failure_mid_run_is_a_divergence():
    def op():
        raise AssertionError("events-agree: [] != [1]")
    result = run_machine(machine_with(op), "native", FAST)
    assert result.failure is not None and result.failure.property == "events-agree"


def test_vllm_crashing_mid_run_is_a_divergence():
    crash = in_vllm("def f():\n    raise KeyError('block')\n", "f")
    result = run_machine(machine_with(crash), "native", FAST)
    assert result.failure is not None and result.failure.property == "no-raise"
    assert "vLLM raised KeyError: 'block' (at vllm/v1/fake.py:2 in f)" in result.failure.message
    assert [s.call for s in result.failure.trace.steps] == ["target.op()"]   # replayable


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
    # A scenario's check: the property's own words, as a machine's Divergence records them
    # (its signature then reads like the machine's, not like an exception's repr).
    scenario = record(raised(lambda: holds("free-queue-agrees", False, "(2, 1) != (1, 2)")))
    assert (scenario["outcome"], scenario["property"], scenario["message"]) == (
        "divergence", "free-queue-agrees", "free-queue-agrees: (2, 1) != (1, 2)")
    assert record(Unavailable("target vllm ... unavailable"))["outcome"] == "unavailable"
    adapter_error = raised(lambda: tiered_lookup_compat.store_output(object()))
    assert record(adapter_error)["outcome"] == "unavailable"
    try:
        pytest.skip("absent: no kv_offload")
    except pytest.skip.Exception as skip:
        assert record(skip)["outcome"] == "absent"
    try:       # a known divergence the test expects: neither a finding nor unavailable
        pytest.xfail("vLLM 0.33.0 unfixed: sched-mamba-mtp-stall")
    except pytest.xfail.Exception as expected:
        assert (record(expected)["outcome"], record(expected)["message"]) == (
            "skipped", "xfail: vLLM 0.33.0 unfixed: sched-mamba-mtp-stall")


# -- skips honour LCH_REQUIRE_TARGETS ----------------------------------------------------------


def test_an_unavailable_target_fails_where_targets_are_required(monkeypatch):
    from properties.run import unavailable
    from sim.errors import CapabilityMissing, TargetUnavailable
    monkeypatch.setenv("LCH_REQUIRE_TARGETS", "1")
    with pytest.raises(Unavailable, match="required here but unavailable: vLLM is not"):
        unavailable("vllm", TargetUnavailable("vLLM is not installed"))
    with pytest.raises(pytest.skip.Exception, match="absent: no ARC before 0.11.1"):
        unavailable("vllm", CapabilityMissing("no ARC before 0.11.1"))   # the release lacks it
    monkeypatch.delenv("LCH_REQUIRE_TARGETS")
    with pytest.raises(pytest.skip.Exception, match="vLLM is not installed"):
        unavailable("vllm", TargetUnavailable("vLLM is not installed"))


def test_in_a_mutation_campaign_a_shape_error_inside_vllm_is_the_mutant_s(monkeypatch):
    """``lch.mutants`` names the mutant its child runs: the unmutated class passed the same
    calls on the same release, so no call can be shaped for another one."""
    unpack = in_vllm("def f(table):\n    entry = table.get(1)\n    return [*entry]\n", "f")
    assert classify(raised(lambda: unpack({}))).kind == "unavailable"
    monkeypatch.setenv("LCH_MUTANT", "m110")
    verdict = classify(raised(lambda: unpack({})))
    assert verdict.kind == "divergence" and "mutant m110" in verdict.why
    adapter = raised(lambda: tiered_lookup_compat.store_output(object()))
    assert classify(adapter).kind == "unavailable"      # the adapter's own error still is


def test_in_a_mutation_campaign_a_constructor_raising_inside_vllm_is_the_mutant_s(monkeypatch):
    """Outside a campaign, a vLLM constructor whose own check rejects the harness's arguments
    is a world the release does not build (``AdapterError``, never a finding); inside one the
    unmutated constructor accepted the same arguments, so the raise is a divergence
    (``no-raise``): KVCacheManager's watermark assertion made strict by a mutant is one."""
    def factory(target, cache_size):
        in_vllm("def f(watermark=0.0):\n    assert watermark > 0.0, 'watermark'\n", "f")()
    monkeypatch.setitem(targets._FACTORIES, ("vllm", "encoder_cache"), factory)
    with pytest.raises(AdapterError, match="building the vllm encoder_cache .*AssertionError"):
        targets.make("vllm", "encoder_cache", cache_size=2)
    monkeypatch.setenv("LCH_MUTANT", "m033")
    with pytest.raises(AssertionError, match="watermark") as raised_error:
        targets.make("vllm", "encoder_cache", cache_size=2)
    assert "mutant m033" in classify(raised_error.value).why


_KNOWN = ("hit-agrees: get_computed_blocks returned Hit(block_ids=((), ()), "
          "num_computed_tokens=0), the model expects Hit(block_ids=((1,), (3, 4)), "
          "num_computed_tokens=2) (shared prefix boundary 2, the model's 0)")


def _failure(message: str):
    from properties.harness import Failure, PropertyFailed, Trace
    prop = message.split(":")[0]
    return Failure(prop, message, Trace(), PropertyFailed(prop, message))


@pytest.mark.parametrize(("expect", "release", "message", "xfails"), [
    ("1", "0.33.0", _KNOWN, True),                       # known, on a release it affects
    ("", "0.33.0", _KNOWN, False),                       # history: found, not expected
    ("1", "0.32.0", _KNOWN, False),                      # a release it does not affect
    ("1", "0.33.0", _KNOWN.replace("returned Hit(block_ids=((), ()), num_computed_tokens=0",
                                   "returned Hit(block_ids=((), ()), num_computed_tokens=3"),
     False),                                             # another shape: another cause
    # Full attention's run past the model's hit too: the same boundary, the same bug.
    ("1", "0.33.0", _KNOWN.replace("boundary 2, the model's 0", "boundary 4, the model's 4"),
     True),
])
def test_the_vllm_session_expects_only_the_known_divergences_of_its_release(
        monkeypatch, expect, release, message, xfails):
    """``known_divergence``: with ``LCH_EXPECT_KNOWN`` set, a vLLM failure whose column,
    property and signature are a known bug's affecting the installed release is that bug
    (an xfail, and the search goes on past it); anything else is none (a divergence)."""
    from properties.prefix_cache_machine import EagleHybridPrefixCacheMachine
    from properties.run import known_divergence
    from sim.vllm import release as vllm_release
    monkeypatch.setenv("LCH_EXPECT_KNOWN", expect)
    monkeypatch.setattr(vllm_release, "installed_release", lambda: release)
    bug = known_divergence(EagleHybridPrefixCacheMachine, "vllm", _failure(message))
    assert (bug.id if bug else None) == ("pc-window-aligns-before-drop" if xfails else None)


def _known_as(monkeypatch, properties: set[str]):
    """``known_divergence`` answering for the native target: a failure of one of
    ``properties`` is a known bug (named after its property), as a release's would be."""
    from properties import run
    monkeypatch.setattr(run, "known_divergence", lambda machine, target, failure: (
        SimpleNamespace(id=failure.property, property=failure.property, reproducer="r.py")
        if failure.property in properties else None))


def test_the_vllm_session_goes_on_past_a_known_divergence(monkeypatch, tmp_path):
    """Two bugs switched on, the one the search meets first known: the search goes on and
    the other fails the test, naming what it went past (stopping at the known one, as the
    session did before, would have been an xfail that hid it)."""
    from properties.encoder_cache_machine import EncoderCacheMachine
    from properties.run import check_machine
    _known_as(monkeypatch, {"slots-agree"})
    with pytest.raises(Divergence) as failed:
        check_machine(EncoderCacheMachine, "native:enc-stale-freed+enc-repeat-item",
                      str(tmp_path), max_examples=300)
    assert failed.value.info["property"] == "freed-not-resident"
    assert str(failed.value).endswith("met before it, known: slots-agree")


def test_a_known_divergence_met_again_is_counted_once_minimized(monkeypatch, tmp_path):
    from properties.prefix_cache_machine import PrefixCacheMachine
    from properties.run import KNOWN_PARTS, check_machine
    _known_as(monkeypatch, {"cached-hash-names-contents", "cached-set-agrees"})
    with pytest.raises(pytest.xfail.Exception) as known:
        check_machine(PrefixCacheMachine, "native:pc-evict-keeps-hash", str(tmp_path))
    times = [int(t) for t in re.findall(r"met (\d+)x", str(known.value))]
    assert times and 1 < sum(times) <= KNOWN_PARTS, str(known.value)
    assert len(list(tmp_path.glob("*.py"))) == len(times)     # one reproducer per bug
