"""What a hunt covers, decided before it starts: every (subsystem, target) pair gets a status.
A subsystem's further machines (its manifest's ``machines``) are pairs of their own, named
``<subsystem>.<machine>``.

- ``run``: the target implements the subsystem and can be built here;
- ``not implemented``: the target has no implementation of it (``sim/targets.py`` declares
  the pairs that exist: ``implemented_pairs()``), or the machine cannot build the target
  (``HarnessMachine.TARGET_BASES``: the tiering layer's machine drives vLLM alone);
- ``not applicable``: ``native:<bug>`` and a subsystem the bug does not act in;
- ``could not run``: the target is missing on this machine (vLLM not installed) and the user
  allowed skips (``--allow-skip``); without it the hunt stops before any work, with the reason.

A target the user named that checks nothing here, and a missing target without
``--allow-skip``, are errors (``HarnessError``: one line, exit 2), never a green report.
"""

from __future__ import annotations

from attrs import frozen

from sim.errors import HarnessError, TargetUnavailable
from sim.native.bugs import BUG_SWITCHES, bug_subsystems
from sim.targets import BASE_TARGETS, SUBSYSTEMS, implemented_pairs, parse_target

RUN, NOT_IMPLEMENTED, NOT_APPLICABLE, COULD_NOT_RUN = (
    "run", "not implemented", "not applicable", "could not run")


@frozen
class Planned:
    subsystem: str
    target: str
    status: str
    why: str = ""


def unavailable(base: str) -> str | None:
    """Why target ``base`` cannot run on this machine, or None. Imports vLLM for ``vllm``."""
    if base != "vllm":
        return None
    from sim.vllm import release
    try:
        release.load()
    except TargetUnavailable as why:
        return str(why)
    # The modules the adapters drive, imported now (setup, ~10-20 s), not in the first
    # example of the search; one this release lacks is reported when its pair runs.
    for name in release.DRIVEN_MODULES:
        try:
            release.import_module(name)
        except TargetUnavailable:
            pass
    return None


def plan(targets: list[str], subsystems: list[str] | None,
         machines: dict[str, tuple[str, ...]], allow_skip: bool = False) -> list[Planned]:
    """The pairs of ``targets`` x ``subsystems`` (default: every machine). ``machines``: hunt
    name (``<subsystem>`` or ``<subsystem>.<machine>``) -> the target bases that machine
    builds (empty: every base its subsystem has)."""
    chosen = list(dict.fromkeys(subsystems or machines))
    missing = [s for s in chosen if s not in machines]
    if missing:
        raise HarnessError(f"no state machine for {', '.join(missing)}; available: "
                           f"{', '.join(machines)}")
    implemented = set(implemented_pairs())
    planned: list[Planned] = []
    for name in dict.fromkeys(targets):
        target = parse_target(name)
        rows = [_status(target, s, implemented, machines[s]) for s in chosen]
        if not any(status == RUN for status, _ in rows):
            raise HarnessError(_checks_nothing(name, target, chosen, implemented))
        why_not = unavailable(target.base)
        if why_not and not allow_skip:
            raise TargetUnavailable(f"target {name!r} cannot run here: {why_not}; "
                                    "or pass --allow-skip to hunt the other targets anyway")
        for subsystem, (status, why) in zip(chosen, rows, strict=True):
            if status == RUN and why_not:
                status, why = COULD_NOT_RUN, why_not
            planned.append(Planned(subsystem, name, status, why))
    return planned


def _status(target, name: str, implemented: set, bases: tuple[str, ...]) -> tuple[str, str]:
    subsystem, _, machine = name.partition(".")
    if (target.base, subsystem) not in implemented:
        return NOT_IMPLEMENTED, f"target {target.base!r} has no {subsystem} implementation"
    if bases and target.base not in bases:
        return NOT_IMPLEMENTED, (f"the {machine} machine builds only {', '.join(bases)}; "
                                 f"hunt it with --target {bases[0]}")
    if target.bug and subsystem not in target.bug_subsystems:
        return NOT_APPLICABLE, (f"bug {target.bug} acts only in "
                                f"{', '.join(target.bug_subsystems)}")
    return RUN, ""


def _checks_nothing(name: str, target, chosen: list[str], implemented: set) -> str:
    has = [s for s in SUBSYSTEMS if (target.base, s) in implemented]
    if target.bug:
        has = [s for s in has if s in target.bug_subsystems]
    return (f"target {name!r} checks none of the subsystems asked for ({', '.join(chosen)}): "
            f"it covers {', '.join(has) or 'nothing'}; drop --subsystem or add one of those")


def coverage_table() -> str:
    """Subsystem x target: what each base target implements, and the bug ids per subsystem
    (``hunt --help`` shows it)."""
    implemented = set(implemented_pairs())
    bases = [b for b in BASE_TARGETS if b != "model"]
    width = max(len(s) for s in SUBSYSTEMS)
    lines = [f"  {'subsystem':<{width}}  " + "  ".join(f"{b:<6}" for b in bases)
             + "  native:<bug-id>"]
    for subsystem in SUBSYSTEMS:
        cells = "  ".join(f"{'yes' if (b, subsystem) in implemented else '-':<6}"
                          for b in bases)
        bugs = [b for b in sorted(BUG_SWITCHES) if subsystem in bug_subsystems(b)]
        lines.append(f"  {subsystem:<{width}}  {cells}  {', '.join(bugs) or '-'}")
    return "\n".join(lines)
