"""Every declared property is shown able to fail (``properties/witnesses``).

Machines are found by walking every module of ``properties`` for ``HarnessMachine``
subclasses, registered or not (the policy, async, Mamba and frees-once variants, the ones
tests define): a new machine declaring a property nothing makes fail fails here, naming it.
A property is witnessed per subsystem (two machines spelling a property alike check it with
their own code); a common property (``COMMON_PROPERTIES``) anywhere. Each witness must exist
and run in CI: a catalogue entry in ``properties/test_known_bugs.py``, a scenario here, a
vLLM mutant in ``lch/test_mutant_witnesses.py`` (``nox -s vllm``), a test where it says.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import fixtures.broken
from fixtures.known_bugs import CATALOGUE
from properties.harness import COMMON_PROPERTIES, HarnessMachine, PropertyFailed
from properties.machines import MACHINES
from properties.witnesses import MUTANTS, SCENARIOS, TESTS
from properties.witnesses.coverage import declared, declaring_machines, unwitnessed, witnesses
from properties.witnesses.scenario import run_scenario, scenario_reproducer, swapped
from sim.manifests import vllm_suites as manifest_vllm_suites
from sim.outcomes import ROOT, classify, property_of

MUTANT_TESTS = "lch/test_mutant_witnesses.py"


def test_every_declared_property_has_a_witness():
    missing = unwitnessed(declaring_machines(), witnesses())
    assert not missing, (
        "declared properties nothing shows able to fail: " + "; ".join(missing) + ". Add a "
        "witness in properties/witnesses (a scenario with a broken stand-in from "
        "fixtures/broken, or a vLLM mutant), or a catalogue entry in fixtures/known_bugs.py; "
        "a property that cannot fail in any world is a defect: remove it or fix its check")


def test_a_machine_with_an_unwitnessed_property_is_named():
    # Not a HarnessMachine subclass: a class made here would linger until collected and be
    # found by the walk above.
    machine = type("NewMachine", (), {"subsystem": "encoder_cache", "PROPERTIES": {
        "returns-agree": "", "never-checked": ""}})
    assert unwitnessed([machine], witnesses()) == ["encoder_cache/never-checked (NewMachine)"]
    everything = {("encoder_cache", "returns-agree"): [("test", "x")],
                  ("encoder_cache", "never-checked"): [("test", "x")]}
    assert unwitnessed([machine], everything) == \
        [f"{prop} (common to every machine)" for prop in sorted(COMMON_PROPERTIES)]


# Machines that are not HarnessMachines check what they check with bare assertions whose
# messages name it, and declare no PROPERTIES, so nothing above can require their witnesses.
# Known, and listed so that another one cannot join them unnoticed.
OUTSIDE_DECLARED_PROPERTIES: dict[str, str] = {}


def test_every_state_machine_declares_its_properties_or_is_listed():
    from hypothesis.stateful import RuleBasedStateMachine
    declaring_machines()                       # imports every module of properties
    found, todo = [], list(RuleBasedStateMachine.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("properties.") and not issubclass(cls, HarnessMachine):
            found.append(cls)
    # A test's subclass of a listed machine (one binding its world) is that machine.
    listed = {b.__name__ for cls in found for b in cls.__mro__} & set(OUTSIDE_DECLARED_PROPERTIES)
    unlisted = sorted(cls.__name__ for cls in found
                      if not {b.__name__ for b in cls.__mro__} & set(OUTSIDE_DECLARED_PROPERTIES))
    assert not unlisted, (f"state machines that declare no PROPERTIES: {unlisted}; make them "
                          "HarnessMachines (declared properties, witnessed here)")
    assert listed == set(OUTSIDE_DECLARED_PROPERTIES), "a listed machine is gone: unlist it"


def test_every_witness_is_of_a_declared_property():
    known = declared(declaring_machines())
    stale = [f"{subsystem}/{prop}: {', '.join(what for _, what in found)}"
             for (subsystem, prop), found in sorted(witnesses().items())
             if (subsystem, prop) not in known and prop not in COMMON_PROPERTIES]
    assert not stale, f"witnesses of properties no machine declares: {stale}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario_fails_its_property_and_passes_without_the_bug(scenario):
    error = run_scenario(scenario)
    assert error is not None, f"{scenario.name}: the program passed ({scenario.why})"
    assert isinstance(error, PropertyFailed), f"{scenario.name}: not a property check: {error!r}"
    assert classify(error).kind == "divergence", classify(error)
    assert property_of(error) == scenario.property, (
        f"{scenario.name} failed {property_of(error)}, not {scenario.property}: {error}")
    control = run_scenario(scenario, broken=False)
    assert control is None, f"{scenario.name}: the program fails without its bug too: {control}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario_reproducer_fails_with_the_bug_and_passes_without(scenario):
    """The reproducer a failure writes is what a user pastes into their own suite: it must
    fail where the property did (its asserted values and closing state cover every check the
    machine makes), and pass on the model and, without the bug, on the native target."""
    text = scenario_reproducer(scenario)
    namespace: dict = {}
    exec(compile(text, f"<reproducer of {scenario.name}>", "exec"), namespace)
    test = next(v for k, v in namespace.items() if k.startswith("test_"))
    with swapped(scenario.broken):
        with pytest.raises(AssertionError):
            test("native")
    test("model")
    if scenario.broken is not None:
        test("native")


def test_catalogue_witnesses_run_in_the_catalogue_test():
    from properties.test_known_bugs import CASES
    run = {(bug.id, subsystem, prop) for bug, subsystem, prop, *_ in CASES}
    for bug in CATALOGUE:
        assert (bug.id, bug.subsystem, bug.property) in run, bug.id
        for subsystem, prop, *_ in bug.also_caught_by:
            assert bug.subsystem in MACHINES and (bug.id, subsystem, prop) in run, bug.id


def vllm_suites() -> list[str]:
    """``VLLM_SUITES`` of the noxfile, derived without importing nox: the manifests' suites
    and the noxfile's cross-cutting ones (``lch/test_manifests.py`` checks the noxfile
    derives it so)."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for node in tree.body:
        if (isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", "") == "CROSS_CUTTING_VLLM_SUITES"):
            return manifest_vllm_suites(ast.literal_eval(node.value))
    raise AssertionError("noxfile.py defines no CROSS_CUTTING_VLLM_SUITES")


def test_mutant_and_test_witnesses_are_collected_where_they_run():
    files = sorted({t.nodeid.split("::")[0] for t in TESTS} | {MUTANT_TESTS})
    for path in files:
        assert (ROOT / path).exists(), path
    suites = [s.split("::")[0] for s in vllm_suites()]
    for path in [MUTANT_TESTS, *(t.nodeid.split("::")[0] for t in TESTS if t.vllm)]:
        assert path in suites, (f"{path} witnesses a property under vLLM: add it to its "
                                "subsystem manifest's vllm_suites (sim/manifests/)")
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "--target", "vllm", *files],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    collected = done.stdout.splitlines()
    for test in TESTS:
        assert any(line.startswith(test.nodeid) for line in collected), (
            f"{test.nodeid} is not collected: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    for mutant in MUTANTS:
        assert any(line.startswith(f"{MUTANT_TESTS}::") and
                   f"{mutant.subsystem}-{mutant.property}" in line for line in collected), (
            f"the mutant witness of {mutant.subsystem}/{mutant.property} is not collected")


def test_stand_ins_are_used_by_some_scenario():
    named = {s.broken for s in SCENARIOS if s.broken}
    package = Path(fixtures.broken.__file__).parent
    unused = []
    for path in sorted(package.glob("[!_]*.py")):
        module = importlib.import_module(f"fixtures.broken.{path.stem}")
        for name, obj in vars(module).items():
            if isinstance(obj, type) and obj.__module__ == module.__name__ \
                    and not name.startswith("_") and f"{module.__name__}:{name}" not in named:
                unused.append(f"{module.__name__}:{name}")
    assert not unused, f"stand-ins no scenario builds: {unused}"
