"""The kinds of witness a declared property may have besides a catalogue entry (which
``fixtures/known_bugs.py`` declares: its native switch must be caught by its property).

Each names the subsystem of the machine whose check it makes fail and the property; the
witness test (``properties/test_property_witnesses.py``) requires one for every
(subsystem, property) a machine declares, and one anywhere for each common property.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen


@frozen
class Scenario:
    """A written-out program: ``actions`` (the machine's ``do_*`` actions with their plain
    arguments, as a replay runs them) in ``world``, on the native target with the stand-in
    ``broken`` (``fixtures/broken``, ``module:Class``) built in its place, run through the
    machine's own actions and invariants; it must fail ``property``, and the same program on
    the plain native target (in ``control_world`` where the world itself is the fault) must
    pass. ``ends``: the run's closing steps and their checks (``end_of_run``) follow."""

    name: str
    machine: str                       # module:Class
    property: str
    world: Any
    actions: tuple[tuple, ...]
    broken: str | None                 # module:Class of the stand-in; None: native itself
    why: str                           # the bug, or what the world does, in a sentence
    ends: bool = False
    control_world: Any = None          # where ``broken`` is None: a world the program passes in


@frozen
class Mutant:
    """A planted bug in a real vLLM 0.33.0 class: the mutant ``diff`` (``lch.mutate``'s
    one-line name) of ``vllm_class`` (``module:Class``), applied in a forked child, where the
    written-out program (``world``, ``actions``, ``ends`` as in ``Scenario``) on ``machine``
    against the ``vllm`` target must fail ``property``; the same program on the real class
    must pass. Run by ``lch/test_mutant_witnesses.py`` in ``nox -s vllm``."""

    subsystem: str
    property: str
    machine: str
    vllm_class: str
    diff: str
    world: Any
    actions: tuple[tuple, ...]
    why: str
    ends: bool = False


@frozen
class Test:
    """A test of the repository that makes ``property`` fail another way (``nodeid``);
    ``vllm``: it runs in ``nox -s vllm`` (its file is in ``VLLM_SUITES``), else in the fast
    tier."""

    subsystem: str                     # "" for a common property
    property: str
    nodeid: str
    why: str
    vllm: bool = False
