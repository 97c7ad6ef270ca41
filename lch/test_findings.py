"""Findings without a hunt: ids keyed by property and normalized minimal program, ``--accept``
read from an id or a reproducer file (bad ones end in one line), ``native:A+B`` targets, and
workers' reports merged by finding id."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import attrs
import pytest
from hypothesis import Phase, settings

import fixtures.profiles  # noqa: F401 - the ci profile
from lch.workers import _add_pair
from properties.findings import finding_id, normalized_program, parse_accept
from properties.harness import Failure, Step, Trace
from properties.machines import machine_for
from properties.reproducer import write_reproducer
from properties.run import run_machine
from sim.errors import HarnessError
from sim.targets import make, parse_target


def failure(property: str, config: dict, steps: list[tuple[str, str | None]],
            setup: tuple[str, ...] = ()) -> Failure:
    return Failure(property, property, Trace(list(setup), config, None,
                                             [Step(call, expect, "") for call, expect in steps]),
                   AssertionError(property))


STALE = [("cache.can_allocate(r0, 0)", "True"), ("cache.allocate(r0, 0)", None),
         ("cache.free(r0)", None), ("cache.can_allocate(r0, 1)", "True"),
         ("cache.get_freed_mm_hashes()", "[]")]


def test_one_program_one_id_whatever_the_target_layout_or_names():
    one = failure("freed-not-resident", {"cache_size": 1, "target": "native:enc-stale-freed"},
                  STALE, setup=("r0 = ReqView('r0', (img0, img1))",))
    # The same calls on vllm, with two requests instead of one carrying two items, and the
    # ids numbered differently: one finding.
    other = failure("freed-not-resident", {"cache_size": 1, "target": "vllm"},
                    [(c.replace("r0, 1", "r1, 0").replace("r0", "r3"), e) for c, e in STALE],
                    setup=("r3 = ReqView('r3', (img5,))", "r1 = ReqView('r1', (img7,))"))
    assert finding_id("encoder_cache", one) == finding_id("encoder_cache", other)
    assert finding_id("encoder_cache", one).startswith("encoder_cache/freed-not-resident/")
    assert "native" not in normalized_program(one)
    # Answers that differ only by numbering: one finding.
    named = [failure("slots-agree", {}, [("cache.get_freed_mm_hashes()", f"['img{n}', 'img{m}']")])
             for n, m in ((0, 1), (4, 2))]
    assert finding_id("encoder_cache", named[0]) == finding_id("encoder_cache", named[1])


@pytest.mark.parametrize("change", ["property", "config", "call", "answer"])
def test_a_second_bug_gets_its_own_id(change):
    base = failure("slots-agree", {"cache_size": 1}, STALE)
    other = {
        "property": lambda: attrs.evolve(base, property="freed-not-resident"),
        "config": lambda: failure("slots-agree", {"cache_size": 2}, STALE),
        "call": lambda: failure("slots-agree", {"cache_size": 1},
                                [*STALE[:2], ("cache.reset()", None), *STALE[3:]]),
        "answer": lambda: failure("slots-agree", {"cache_size": 1},
                                  [*STALE[:-1], ("cache.get_freed_mm_hashes()", "['img0']")]),
    }[change]()
    assert finding_id("encoder_cache", base) != finding_id("encoder_cache", other)


def test_accept_takes_an_id_or_the_reproducer_that_names_it(tmp_path):
    found = run_machine(machine_for("encoder_cache"), "native:enc-repeat-item",
                        settings(settings.get_profile("ci"), max_examples=100,
                                 phases=[Phase.explicit, Phase.generate])).failure
    path = write_reproducer(machine_for("encoder_cache"), found, "native:enc-repeat-item",
                            tmp_path)
    named = finding_id("encoder_cache", found)
    assert parse_accept(named) == [named]
    assert parse_accept(str(path)) == [named]
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.FINDING == named                  # the file still runs as a test


@pytest.mark.parametrize("text, says", [
    ("slots-agree", "neither a finding id"),
    ("encoder_cache/no-such-property/1a2b3c4d", "has no property 'no-such-property'"),
    ("kv_cache/slots-agree/1a2b3c4d", "unknown subsystem 'kv_cache'"),
    ("found/test_missing.py", "no such reproducer file"),
    ("HAND", "names no finding"),
])
def test_a_bad_accept_is_one_line_naming_the_fix(tmp_path, text, says):
    if text == "HAND":
        text = str(tmp_path / "test_hand_written.py")
        Path(text).write_text("def test_x():\n    pass\n")
    with pytest.raises(HarnessError, match=says) as raised:
        parse_accept(text)
    assert "\n" not in str(raised.value)


def test_native_target_takes_several_bugs():
    target = parse_target("native:enc-stale-freed+enc-repeat-item")
    assert target.bugs == {"enc-stale-freed", "enc-repeat-item"}
    assert target.bug_subsystems == ("encoder_cache", "scheduler_pass")
    assert make(target.name, "encoder_cache", cache_size=2).bugs == target.bugs
    mixed = parse_target("native:enc-stale-freed+offload-id-reuse")
    assert set(mixed.bug_subsystems) == {"encoder_cache", "scheduler_pass", "offload_engine"}
    for bad, says in [("native:enc-stale-freed+nope", "unknown bug id 'nope'"),
                      ("native:enc-stale-freed+enc-stale-freed", "names a bug twice")]:
        with pytest.raises(HarnessError, match=says):
            parse_target(bad)


def _pair(findings: list[dict], accepted: list[dict]) -> dict:
    return {"subsystem": "encoder_cache", "target": "vllm",
            "result": "failed" if findings else "accepted only", "examples": 10, "steps": 99,
            "rounds": 1, "seconds": 1.0, "database_examples": 0, "events": {},
            "hazards_never_reached": [], "failure": findings[0] if findings else None,
            "findings": findings, "accepted": accepted, "unconfirmed": 0, "cut_rounds": 0,
            "database_replay": None, "trace_hash": "x"}


def test_workers_merge_findings_by_id():
    a, b = ({"id": f"encoder_cache/slots-agree/{h}", "seen": 2} for h in ("aaaaaaaa", "bbbbbbbb"))
    known = {"id": "encoder_cache/freed-not-resident/cccccccc", "seen": 3}
    pairs: dict = {}
    _add_pair(pairs, _pair([dict(a)], [dict(known)]))
    _add_pair(pairs, _pair([dict(b), dict(a)], [dict(known)]))
    (merged,) = pairs.values()
    assert [(f["id"], f["seen"]) for f in merged["findings"]] == [(a["id"], 4), (b["id"], 2)]
    assert merged["accepted"] == [{**known, "seen": 6}]
    assert merged["result"] == "failed"


def test_the_golden_program_has_the_id_hunts_give_the_stale_freed_entry():
    from properties.test_reproducer import stale_freed_failure
    assert finding_id("encoder_cache", stale_freed_failure()) == \
        "encoder_cache/freed-not-resident/63dd24be"     # the README and the fixtures name it


def test_curated_reproducers_name_their_findings():
    root = Path(__file__).resolve().parents[1] / "fixtures" / "reproducers"
    assert parse_accept(str(root / "test_encoder_cache_vllm_stale_freed.py")) == [
        "encoder_cache/freed-not-resident/63dd24be"]
    assert len(parse_accept(str(root / "test_encoder_cache_vllm_repeat_item.py"))) == 2
