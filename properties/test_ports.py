"""Every implementation of a subsystem satisfies its port (``sim/ports.py``): the model, the
native target and, where vLLM is installed, the vllm adapter have each of the port's members,
and each method takes the port's parameters by the port's names (so a machine or a
reproducer can call any of them the same way)."""

from __future__ import annotations

import inspect

import pytest

from properties.run import unavailable
from sim import targets
from sim.errors import TargetUnavailable
from sim.manifests import all_manifests
from sim.ports import PORTS

# Each subsystem's small world comes from its manifest (``small_world``).
SMALL_CONFIGS = {m.name: m.small_world for m in all_manifests()}
BASES = ["model", "native", "vllm"]


def port_members(port: type) -> dict[str, inspect.Signature | None]:
    """Member name -> the method's signature (None: a plain attribute), the port's own and
    those of the ports it extends."""
    members: dict[str, inspect.Signature | None] = {}
    for base in reversed(port.__mro__):
        if base is object or base.__module__ == "typing":
            continue
        members.update(dict.fromkeys(vars(base).get("__annotations__", {})))
        for name, value in vars(base).items():
            if not name.startswith("_") and callable(value):
                members[name] = inspect.signature(value)
    return members


def mismatches(port: type, implementation: object) -> list[str]:
    problems = []
    for name, wanted in sorted(port_members(port).items()):
        if not hasattr(implementation, name):
            problems.append(f"{name}: missing")
            continue
        if wanted is None:
            continue
        got = inspect.signature(getattr(implementation, name))
        want_names = [p for p in wanted.parameters if p != "self"]
        got_names = list(got.parameters)
        takes_any = any(p.kind is p.VAR_KEYWORD for p in got.parameters.values())
        missing = [p for p in want_names if p not in got_names and not takes_any]
        if missing:
            problems.append(f"{name}{got}: lacks parameter(s) {missing} of the port")
    return problems


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("subsystem", sorted(PORTS))
def test_implementation_satisfies_its_port(subsystem, base):
    if (base, subsystem) not in targets.implemented_pairs():
        pytest.skip(f"target {base} has no {subsystem} implementation")
    try:
        implementation = targets.make(base, subsystem, **SMALL_CONFIGS[subsystem])
    except TargetUnavailable as why:
        unavailable(base, why)
    assert mismatches(PORTS[subsystem], implementation) == []


def test_a_wrong_implementation_is_caught():
    class Half:
        def check_and_update_cache(self, req, i):   # renamed parameters
            return False

    problems = mismatches(PORTS["encoder_cache"], Half())
    assert "allocate: missing" in problems
    assert any(p.startswith("check_and_update_cache") for p in problems)
