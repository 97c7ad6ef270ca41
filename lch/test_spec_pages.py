"""Each subsystem's page under ``docs/specs/`` names, in backticks, every property its
machines declare and every catalogued bug of the subsystem, so a property or a bug added to
the code without its page is caught (and a page that names one the code dropped is read
against the code the next time that page is edited)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fixtures.known_bugs import CATALOGUE
from properties import (
    encoder_cache_machine,
    encoder_decoder_cache_machine,
    offload_engine_machine,
    prefix_cache_machine,
    scheduler_pass_machine,
    secondary_tier_machine,
    tiered_lookup_checks,
    tiering_manager_machine,
)
from properties.harness import COMMON_PROPERTIES

ROOT = Path(__file__).resolve().parent.parent
HARNESS = tuple(COMMON_PROPERTIES)

# page -> (properties its machines declare, subsystems whose catalogue entries it names)
PAGES = {
    "docs/specs/encoder-cache.md": (
        (*encoder_cache_machine.PROPERTIES, *encoder_decoder_cache_machine.PROPERTIES,
         *HARNESS), ("encoder_cache", "encoder_decoder_cache")),
    "docs/specs/scheduler-pass.md": (
        (*scheduler_pass_machine.PROPERTIES, *HARNESS), ("scheduler_pass",)),
    "docs/specs/tiered-lookup.md": (
        (*tiered_lookup_checks.PROPERTIES, *secondary_tier_machine.PROPERTIES,
         *tiering_manager_machine.PROPERTIES, *HARNESS), ("tiered_lookup", "secondary_tier")),
    "docs/specs/offload-engine.md": (
        (*offload_engine_machine.PROPERTIES, *HARNESS), ("offload_engine",)),
    # The prefix cache's page stays where its links point; docs/specs/prefix-cache.md leads there.
    "docs/prefix-cache.md": (tuple(prefix_cache_machine.PROPERTIES), ("prefix_cache",)),
}


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


def test_every_subsystem_with_a_catalogue_entry_has_a_page():
    covered = {s for _, subsystems in PAGES.values() for s in subsystems}
    assert {bug.subsystem for bug in CATALOGUE} <= covered


def test_a_page_that_leaves_out_a_name_is_caught():
    page = "`returns-agree` and `slots-agree` are checked; freed-not-resident is not quoted"
    assert unnamed(page, ("returns-agree", "slots-agree", "freed-not-resident")) == [
        "freed-not-resident"]
