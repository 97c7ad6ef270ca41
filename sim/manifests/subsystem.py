"""The ``Subsystem`` record a manifest declares, and the one way a reference is resolved.

Standard library only: ``noxfile.py`` imports the manifests in nox's own interpreter, which has
neither attrs nor torch. References are dotted strings ("module:object", or a module), so
``sim`` never imports the layers above it (``properties``, ``fixtures``, ``lch``); whoever
needs the object (the machine registry, the catalogue) resolves it with ``resolve``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field


class ManifestError(Exception):
    """A manifest names a module or object that does not exist (one line: which manifest,
    which field, how to fix it)."""


@dataclass(frozen=True)
class Column:
    """A column of the ``history`` matrix: the test files whose outcomes it reports, and
    whether history also hunts it (``hunt --subsystem <name>``: only a subsystem can be),
    with which of the subsystem's further machines (``Subsystem.machines``) beside its main
    one: those whose tests the column's suites run, so a bug the suites can meet only in a
    further machine's worlds is hunted there too."""

    name: str
    suites: tuple[str, ...]
    hunted: bool = False
    hunt_machines: tuple[str, ...] = ()

    def hunt_scope(self) -> tuple[str, ...]:
        """What history's hunt of this column passes to ``hunt --subsystem``."""
        return (self.name, *(f"{self.name}.{m}" for m in self.hunt_machines))


@dataclass(frozen=True)
class Subsystem:
    """One subsystem's facts, in its own file ``sim/manifests/<name>.py``.

    ``rank`` orders every registry derived from the manifests (targets, machines, catalogue,
    history columns, nox suites). ``factories``: target base ("model", "native", "vllm") ->
    "module:function" taking ``(target, **world)``; a base left out has no implementation.
    ``bugs``: the native switches whose home is this subsystem (its catalogue runs them);
    ``also_acts_in``: the subsystems built on this one, where those switches act too (the
    encoder cache's under the scheduler pass).
    """

    name: str
    rank: int
    factories: dict[str, str]
    # A small world every base builds (``properties/test_ports.py`` builds each with it).
    small_world: dict[str, object]
    port: str                                   # "module:Protocol"
    machine: str                                # "module:HarnessMachine subclass"
    worlds: str                                 # module: the machine's world strategy
    shrink: str                                 # module: the minimizer's simpler worlds
    bugs: tuple[str, ...] = ()
    also_acts_in: tuple[str, ...] = ()
    catalogue: str | None = None                # module whose ``BUGS`` are the entries
    vllm_suites: tuple[str, ...] = ()           # pytest args of the nox vllm session
    history: tuple[Column, ...] = ()
    mutation_subjects: str | None = None        # "module:function(Subject) -> {spec: Subject}"
    # Its behaviour spec, which names every property of its machine (and of the modules in
    # ``spec_properties``, each with a ``PROPERTIES``) and every catalogued bug of it.
    spec_page: str = ""
    spec_properties: tuple[str, ...] = ()
    # Its test files by cost tier (``fixtures/tiers.py``: fast, machines, catalogue, slow).
    tests: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Its further machines (other worlds or another layer of it), name -> "module:Class": the
    # hunt runs each as ``<subsystem>.<name>`` beside ``machine``, which keeps the plain name
    # (so the main machine's finding ids, seeds and accept lists stay what they were).
    machines: dict[str, str] = field(default_factory=dict)
    source: str = field(default="", compare=False)   # the manifest's file, for errors

    def references(self) -> list[tuple[str, str]]:
        """(field, reference) for every module or object this manifest names."""
        refs = [(f"factories[{base!r}]", ref) for base, ref in self.factories.items()]
        refs += [("port", self.port), ("machine", self.machine), ("worlds", self.worlds),
                 ("shrink", self.shrink)]
        refs += [(f"machines[{name!r}]", ref) for name, ref in self.machines.items()]
        refs += [(name, ref) for name, ref in (("catalogue", self.catalogue),
                                              ("mutation_subjects", self.mutation_subjects))
                 if ref]
        return refs


def hunt_names(manifest: Subsystem) -> list[str]:
    """What a hunt can run of ``manifest``: its machine, by the subsystem's name, then each
    further machine as ``<subsystem>.<name>``."""
    return [manifest.name, *(f"{manifest.name}.{name}" for name in manifest.machines)]


def resolve(manifest: Subsystem, what: str, ref: str) -> object:
    """The module, or the module's object, that ``ref`` ("module" or "module:name") names;
    a ``ManifestError`` naming the manifest and the fix when it does not exist."""
    module_name, _, name = ref.partition(":")
    where = manifest.source or f"the {manifest.name} manifest"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is None or not module_name.startswith(error.name):
            raise          # the module exists but an import inside it failed: its own error
        raise ManifestError(f"{where}: {what} names module {module_name!r}, which does not "
                            f"exist; create {module_name.replace('.', '/')}.py or fix the "
                            f"reference") from None
    if not name:
        return module
    try:
        return getattr(module, name)
    except AttributeError:
        raise ManifestError(f"{where}: {what} names {ref!r}, but {module_name} defines no "
                            f"{name!r}; define it there or fix the reference") from None


def check_references(manifest: Subsystem) -> None:
    """Resolve every module and object ``manifest`` names (importing them): the first that
    does not exist raises its ``ManifestError``."""
    for what, ref in manifest.references():
        resolve(manifest, what, ref)
