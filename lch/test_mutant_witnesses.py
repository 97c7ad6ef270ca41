"""Witnesses in vLLM's own classes: each mutant ``properties/witnesses`` declares (``MUTANTS``)
is a one-line bug planted in a vLLM 0.33.0 class, and with it the machine, run against the
``vllm`` target, fails exactly the property it witnesses. The mutant is applied the way the
mutation campaign applies one (``lch.mutate.apply``), in a forked child (``lch.forked``), so
the parent's live class is never touched. It lives in ``lch/`` because it plants the bugs
with ``lch.mutate`` (``properties`` sits below ``lch``); ``nox -s vllm`` runs it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lch import forked, mutate
from properties.run import unavailable
from properties.witnesses import MUTANTS
from properties.witnesses.scenario import program_reproducer, reproducer_test, run_program
from sim.errors import TargetUnavailable
from sim.outcomes import classify, property_of

RELEASE = "0.33.0"          # the diffs name lines of this release's classes
CHILD_CPU_S = 60


def _class(path: str):
    from sim.vllm import release
    module_name, _, name = path.partition(":")
    module = release.import_module(module_name)
    return module, getattr(module, name), release.release()


def find_mutant(path: str, class_name: str, diff: str) -> mutate.Mutant | None:
    """The mutant of ``class_name`` named ``diff``. ``mutate.mutants`` compiles every mutant
    of the class to drop those that do not compile (35 s for the tiering manager's 479), which
    this one-mutant lookup does not need (``mutate.apply`` compiles the one it applies): it
    walks the same sites and names them the same way. Its index is not the campaign's."""
    source = Path(path).read_text()
    lines = source.splitlines()
    for method, site, node in mutate._sites(ast.parse(source), class_name):
        before, after = mutate._texts(lines, site, node)
        found = mutate.Mutant(-1, method, node.lineno, site[0], before, after, site)
        if found.diff == diff:
            return found
    return None


def _run(witness, module, cls, mutant) -> dict:
    mutate.apply(mutant, module, cls)
    error = run_program(witness.machine, "vllm", witness.world, witness.actions, witness.ends,
                        witness.diff)
    if error is None:
        return {"outcome": "passed"}
    verdict = classify(error)
    # The reproducer the failure writes, run here, on the mutant: it must fail as well.
    text = program_reproducer(witness.machine, "vllm", witness.world, witness.actions,
                              witness.ends, witness.diff)
    try:
        reproducer_test(text)("vllm")
        on_mutant = "passed"
    except AssertionError:
        on_mutant = "failed"
    return {"outcome": verdict.kind, "property": property_of(error),
            "message": f"{type(error).__name__}: {error}"[:600],
            "reproducer": text, "reproducer_on_mutant": on_mutant}


@pytest.mark.parametrize("witness", MUTANTS, ids=[f"{m.subsystem}-{m.property}" for m in MUTANTS])
def test_a_planted_vllm_bug_fails_its_property(target, witness, tmp_path):
    if target != "vllm":
        pytest.skip("a mutant of a vLLM class: run with --target vllm (nox -s vllm)")
    try:
        module, cls, release = _class(witness.vllm_class)
        control = run_program(witness.machine, "vllm", witness.world, witness.actions,
                              witness.ends, witness.diff)
    except TargetUnavailable as why:
        unavailable(target, why)
    if release != RELEASE:
        pytest.skip(f"the mutants are lines of vLLM {RELEASE}'s classes, not {release}'s")
    assert control is None, f"the program fails on vLLM's real class already: {control}"
    mutant = find_mutant(module.__file__, cls.__name__, witness.diff)
    assert mutant is not None, (f"no mutant {witness.diff!r} of vLLM {RELEASE}'s "
                                f"{cls.__name__}: write the diff as lch.mutate names it "
                                "(python -m lch.mutants --list)")
    task = forked.Task("witness", lambda: _run(witness, module, cls, mutant), CHILD_CPU_S)
    (done,) = forked.run_all([task], jobs=1, workdir=tmp_path)
    result = done.result
    assert result["outcome"] == "divergence", (
        f"with {witness.diff!r} the program did not diverge: {result}")
    assert result["property"] == witness.property, (
        f"with {witness.diff!r} the machine failed {result['property']}, not "
        f"{witness.property}: {result['message']}")
    # Its reproducer fails on the mutant, and passes on the model and vLLM's real class.
    assert result["reproducer_on_mutant"] == "failed", (
        f"with {witness.diff!r} the reproducer passed:\n{result['reproducer']}")
    test = reproducer_test(result["reproducer"])
    test("model")
    test("vllm")


def test_the_one_mutant_lookup_names_mutants_as_the_campaign_does():
    # Any module's class will do (this one needs no vLLM): every mutant the campaign lists
    # is found under its diff, at the same site.
    from models import encoder_cache
    path = encoder_cache.__file__
    everything = mutate.mutants(Path(path).read_text(), "EncoderCacheModel")
    assert everything
    for m in everything:
        found = find_mutant(path, "EncoderCacheModel", m.diff)
        assert (found.method, found.line, found.site) == (m.method, m.line, m.site), m.diff
    assert find_mutant(path, "EncoderCacheModel", "no such line") is None
