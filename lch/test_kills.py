"""The kill rules (``lch/kills.py``) on small fake suites, each run as a campaign runs one (a
forked child, ``suites.run_pytest``): a kill is recorded only for a declared property or a
raise inside vLLM, with the test and the property; an ``Unavailable``, a ``HarnessError``, a
health check, a bare assertion, a fixture error, a timeout and a dead child each come out as
their own outcome. No vLLM needed: code "of vLLM" or "of the harness" is compiled under its
module's name (``sim.outcomes`` places frames by module)."""

from __future__ import annotations

import os

import pytest

from lch import forked, suites

# Every fake test file starts with this: ``of(module, source)`` compiles ``source`` as if it
# were module ``module`` (vllm.*, properties.*) and returns its function ``run``.
PRELUDE = '''
import pytest


def of(module, source):
    scope = {"__name__": module}
    exec(compile(source, module.replace(".", "/") + ".py", "exec"), scope)
    return scope["run"]
'''

HARNESS_CASES = {
    # name: (test body, expected outcome, expected property)
    "property": ('''
from properties.harness import PropertyFailed
def test_it():
    raise PropertyFailed("slots-agree", "num_free_slots 1 != 0")
''', "killed", "slots-agree"),
    "scenario": ('''
from properties.scenarios import agrees
def test_it():
    agrees("returns-agree", [1], [2])
''', "killed", "returns-agree"),
    "divergence": ('''
from fixtures.pytest_plugin import Divergence
def test_it():
    raise Divergence("returns-agree: x", property="returns-agree", calls=3)
''', "killed", "returns-agree"),
    "named-assert": ('''
check = of("properties.fake_check", "def run():\\n    assert 1 == 2, 'slots-agree: 1 != 2'\\n")
def test_it():
    check()
''', "killed", "slots-agree"),
    "vllm-raises": ('''
call = of("vllm.v1.fake", "def run():\\n    return {}['img0']\\n")
def test_it():
    call()
''', "killed", "no-raise"),
    "bare-assert": ('''
check = of("properties.fake_check", "def run():\\n    assert 1 == 2\\n")
def test_it():
    check()
''', "unnamed", None),
    "undeclared-name": ('''
check = of("properties.fake_check", "def run():\\n    assert 0, 'made-up-property: no'\\n")
def test_it():
    check()
''', "unnamed", None),
    "unavailable": ('''
from fixtures.pytest_plugin import Unavailable
def test_it():
    raise Unavailable("target vllm is required here but unavailable: no vllm")
''', "unavailable", None),
    "harness-error": ('''
from sim.errors import AdapterError
def test_it():
    raise AdapterError("vllm failed in allocate(0): TypeError: bad keyword")
''', "unavailable", None),
    "health-check": ('''
from hypothesis import given, settings, strategies as st
@settings(database=None, max_examples=5, suppress_health_check=())
@given(st.integers().filter(lambda n: False))
def test_it(n):
    pass
''', "unavailable", None),
    "vllm-shape-error": ('''
call = of("vllm.v1.fake", "def run():\\n    return None.num_embeds\\n")
def test_it():
    call()
''', "unavailable", None),
    "fixture-error": ('''
@pytest.fixture
def broken():
    raise RuntimeError("no world")
def test_it(broken):
    pass
''', "error", None),
    "collection-error": ("def test_it(:\n", "error", None),
    "passes": ("def test_it():\n    pass\n", "survived", None),
}

UPSTREAM_CASES = {
    "assertion": ("def test_it():\n    assert [1] == [2]\n", "killed", "test-assertion"),
    "raises-nothing": ('''
def test_it():
    with pytest.raises(KeyError):
        pass
''', "killed", "test-assertion"),
    "vllm-raises": ('''
call = of("vllm.v1.fake", "def run():\\n    return None.num_embeds\\n")
def test_it():
    call()
''', "killed", "vllm-raised"),
    "own-code-raises": ("def test_it():\n    None.num_embeds\n", "error", None),
    "fixture-error": ('''
@pytest.fixture
def manager():
    raise ImportError("no module named 'transformers'")
def test_it(manager):
    pass
''', "error", None),
    "collection-error": ("import no_such_module_here\n", "error", None),
}


def _run(tmp_path, cases: dict, judge: str) -> dict[str, dict]:
    tasks = []
    for name, (body, _outcome, _prop) in cases.items():
        folder = tmp_path / judge / name
        folder.mkdir(parents=True)
        (folder / "test_case.py").write_text(PRELUDE + body)
        tasks.append(forked.Task(name, lambda folder=folder: suites.run_pytest(
            ["-p", "no:xdist", "test_case.py"], folder, judge=judge), timeout_s=120))
    done = forked.run_all(tasks, jobs=2, workdir=tmp_path / f"runs-{judge}")
    return {task.key: task.result for task in done}


@pytest.fixture(scope="module")
def harness_results(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("kills"), HARNESS_CASES, "harness")


@pytest.fixture(scope="module")
def upstream_results(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("kills"), UPSTREAM_CASES, "upstream")


@pytest.mark.parametrize("case", list(HARNESS_CASES))
def test_the_harness_rule(harness_results, case):
    _body, outcome, prop = HARNESS_CASES[case]
    result = harness_results[case]
    assert result["outcome"] == outcome, result
    assert result.get("property") == prop, result
    if outcome == "killed":
        assert result["test"] == "test_case.py::test_it" and result["message"]
    if outcome not in ("killed", "survived"):
        assert result["message"], result                      # why it is no kill


@pytest.mark.parametrize("case", list(UPSTREAM_CASES))
def test_vllms_own_tests_rule(upstream_results, case):
    _body, outcome, prop = UPSTREAM_CASES[case]
    result = upstream_results[case]
    assert result["outcome"] == outcome, result
    assert result.get("property") == prop, result


MIXED_SUITE = PRELUDE + '''
from fixtures.pytest_plugin import Unavailable
from properties.harness import PropertyFailed

check = of("properties.fake_check", "def run():\\n    assert 1 == 2\\n")


def test_a_target_missing():
    raise Unavailable("target vllm is required here but unavailable")


def test_b_bare():
    check()


def test_c_property():
    raise PropertyFailed("slots-agree", "1 != 0")


def test_d_never_run():
    raise PropertyFailed("returns-agree", "stopped before this")
'''


def test_a_failure_that_is_no_kill_does_not_stop_the_suite_and_a_kill_does(tmp_path):
    (tmp_path / "test_mixed.py").write_text(MIXED_SUITE)
    task = forked.Task("mixed", lambda: suites.run_pytest(["-p", "no:xdist", "test_mixed.py"],
                                                          tmp_path), timeout_s=120)
    [done] = forked.run_all([task], jobs=1, workdir=tmp_path / "runs")
    result = done.result
    assert result["outcome"] == "killed" and result["property"] == "slots-agree", result
    assert result["test"] == "test_mixed.py::test_c_property"
    assert result["failures"] == {"unavailable": 1, "unnamed": 1, "killed": 1}   # d not run


def test_without_a_kill_the_first_failure_says_why(tmp_path):
    (tmp_path / "test_mixed.py").write_text(MIXED_SUITE)
    args = ["-p", "no:xdist", "test_mixed.py", "-k", "not property and not never"]
    task = forked.Task("mixed", lambda: suites.run_pytest(args, tmp_path), timeout_s=120)
    [done] = forked.run_all([task], jobs=1, workdir=tmp_path / "runs")
    assert done.result["outcome"] == "unavailable", done.result
    assert done.result["failures"] == {"unavailable": 1, "unnamed": 1}


def _dies() -> dict:
    os._exit(1)


def test_a_child_that_dies_without_a_result_is_a_crash(tmp_path):
    [done] = forked.run_all([forked.Task("dies", _dies, timeout_s=30)], jobs=1,
                            workdir=tmp_path)
    assert done.result["outcome"] == "crash", done.result
