"""Which declared properties have which witnesses: the machines found by walking every
module of ``properties`` (registered or not), the witnesses of ``properties/witnesses`` and
of the catalogue, and what is missing. Used by ``properties/test_property_witnesses.py`` and
by ``python -m lch.witnesses`` (the record of the table and of the suites' run times)."""

from __future__ import annotations

import importlib
import pkgutil
from collections import defaultdict

import properties
from fixtures.broken import resolve
from fixtures.known_bugs import CATALOGUE
from properties.harness import COMMON_PROPERTIES, HarnessMachine
from properties.witnesses import MUTANTS, SCENARIOS, TESTS

KINDS = ("catalogue", "scenario", "vllm-mutant", "test")


def declaring_machines() -> list[type[HarnessMachine]]:
    """Every machine class in ``properties`` that declares properties."""
    for info in pkgutil.walk_packages(properties.__path__, "properties."):
        importlib.import_module(info.name)
    found, todo = [], list(HarnessMachine.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return [cls for cls in found if cls.PROPERTIES]


def witnesses() -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(subsystem, property) -> its witnesses as (kind, what). A catalogue entry counts for
    its home property unless the catalogue lets another property stand for it
    (``same_promise``), and for each subsystem it is also caught by."""
    found: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for bug in CATALOGUE:
        if not bug.same_promise:
            found[(bug.subsystem, bug.property)].append(("catalogue", bug.id))
        for subsystem, prop, *_ in bug.also_caught_by:
            found[(subsystem, prop)].append(("catalogue", f"{bug.id} in {subsystem}"))
    for scenario in SCENARIOS:
        found[(resolve(scenario.machine).subsystem, scenario.property)].append(
            ("scenario", scenario.name))
    for mutant in MUTANTS:
        found[(mutant.subsystem, mutant.property)].append(("vllm-mutant", mutant.diff))
    for test in TESTS:
        found[(test.subsystem, test.property)].append(("test", test.nodeid))
    return found


def declared(machines) -> dict[tuple[str, str], list[str]]:
    """(subsystem, property) -> the names of the machines declaring it."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for cls in machines:
        for prop in cls.PROPERTIES:
            out[(cls.subsystem, prop)].append(cls.__name__)
    return {key: sorted(set(names)) for key, names in sorted(out.items())}


def unwitnessed(machines, found) -> list[str]:
    """``subsystem/property (machines)`` for every declared property with no witness, then
    each common property no witness anywhere names."""
    missing = [f"{subsystem}/{prop} ({', '.join(names)})"
               for (subsystem, prop), names in declared(machines).items()
               if (subsystem, prop) not in found]
    named = {prop for _, prop in found}
    return missing + [f"{prop} (common to every machine)" for prop in sorted(COMMON_PROPERTIES)
                      if prop not in named]


def table() -> list[dict]:
    """One row per declared (subsystem, property), then one per common property: its
    machines and its witnesses by kind."""
    found = witnesses()
    rows = []
    for (subsystem, prop), names in declared(declaring_machines()).items():
        rows.append({"subsystem": subsystem, "property": prop, "machines": names,
                     **_by_kind(found.get((subsystem, prop), []))})
    for prop in sorted(COMMON_PROPERTIES):
        rows.append({"subsystem": "", "property": prop, "machines": ["every machine"],
                     **_by_kind([w for (_, p), ws in found.items() if p == prop for w in ws])})
    return rows


def _by_kind(found: list[tuple[str, str]]) -> dict[str, list[str]]:
    return {kind: [what for k, what in found if k == kind] for kind in KINDS}
