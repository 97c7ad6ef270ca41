"""Each subsystem's page under ``docs/specs/`` names, in backticks, every property its
machines declare and every catalogued bug of the subsystem, so a property or a bug added to
the code without its page is caught (and a page that names one the code dropped is read
against the code the next time that page is edited)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fixtures.known_bugs import CATALOGUE
from properties.harness import COMMON_PROPERTIES
from sim.manifests import all_manifests, resolve

ROOT = Path(__file__).resolve().parent.parent
HARNESS = tuple(COMMON_PROPERTIES)


def pages() -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """page -> (the properties its subsystems' machines declare, with the harness's own; the
    subsystems whose catalogue entries it names), from each manifest's ``spec_page``."""
    found: dict[str, tuple[list[str], list[str]]] = {}
    for m in all_manifests():
        if not m.spec_page:
            continue
        properties, subsystems = found.setdefault(m.spec_page, ([*HARNESS], []))
        for module in (m.machine.partition(":")[0], *m.spec_properties):
            properties.extend(resolve(m, "spec_properties", module).PROPERTIES)
        subsystems.append(m.name)
    return {page: (tuple(dict.fromkeys(p)), tuple(s)) for page, (p, s) in found.items()}


PAGES = pages()


def unnamed(page_text: str, names) -> list[str]:
    """The ``names`` the page does not spell in backticks."""
    quoted = set(re.findall(r"`([^`\n]+)`", page_text))
    return sorted(set(names) - quoted)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_page_names_every_declared_property(page):
    properties, _ = PAGES[page]
    missing = unnamed((ROOT / page).read_text(), properties)
    assert not missing, f"{page} does not name the declared properties {missing}: say, in " \
        "backticks, what each one checks"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_page_names_every_catalogued_bug(page):
    _, subsystems = PAGES[page]
    ids = [bug.id for bug in CATALOGUE if bug.subsystem in subsystems]
    assert ids, f"no catalogue entry for {subsystems}: is the subsystem's name right?"
    missing = unnamed((ROOT / page).read_text(), ids)
    assert not missing, f"{page} does not name the catalogued bugs {missing}: add each, in " \
        "backticks, with what it does"


def test_every_subsystem_has_a_page():
    missing = [m.source or m.name for m in all_manifests() if not m.spec_page]
    assert not missing, f"{missing}: give each manifest its spec_page (docs/specs/<s>.md)"
    covered = {s for _, subsystems in PAGES.values() for s in subsystems}
    assert {bug.subsystem for bug in CATALOGUE} <= covered


def test_a_page_that_leaves_out_a_name_is_caught():
    page = "`returns-agree` and `slots-agree` are checked; freed-not-resident is not quoted"
    assert unnamed(page, ("returns-agree", "slots-agree", "freed-not-resident")) == [
        "freed-not-resident"]
