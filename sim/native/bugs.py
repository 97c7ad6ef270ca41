"""The bug switches of the native target: bug id -> the subsystem whose implementation
reads it, or a tuple of subsystems when a bug lives in a component several subsystems are built
on (the encoder cache's bugs also act in the scheduler pass, which drives that cache). The first
name is the bug's home: the catalogue runs its machine. ``native:<bug-id>`` turns exactly one
on. Each subsystem's manifest lists its switches (``bugs``, and ``also_acts_in``); its
catalogue (``fixtures/known_bugs.py`` gathers them) adds the source, the property that must
catch each and the bound on its minimal reproducer; a test keeps the two lists equal."""

from __future__ import annotations

from sim.manifests import ManifestError, Subsystem, all_manifests


def bug_switches(manifests: tuple[Subsystem, ...]) -> dict[str, str | tuple[str, ...]]:
    """Bug id -> its home subsystem, or (home, the subsystems it also acts in)."""
    switches: dict[str, str | tuple[str, ...]] = {}
    for manifest in manifests:
        for bug in manifest.bugs:
            if bug in switches:
                raise ManifestError(f"{manifest.source}: bug switch {bug!r} is already declared "
                                 f"by {bug_home(switches[bug])}; give it another id")
            switches[bug] = ((manifest.name, *manifest.also_acts_in) if manifest.also_acts_in
                             else manifest.name)
    return switches


def bug_home(value: str | tuple[str, ...]) -> str:
    return value if isinstance(value, str) else value[0]


BUG_SWITCHES: dict[str, str | tuple[str, ...]] = bug_switches(all_manifests())


def bug_subsystems(bug_id: str) -> tuple[str, ...]:
    """The subsystems whose native implementation reads switch ``bug_id``, home first."""
    value = BUG_SWITCHES[bug_id]
    return (value,) if isinstance(value, str) else tuple(value)
