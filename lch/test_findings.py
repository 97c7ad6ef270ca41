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
from properties.findings import finding_id, normalized_program, parse_accept, program_id, signature
from properties.harness import Failure, Step, Trace
from properties.machines import machine_for
from properties.reproducer import write_reproducer
from properties.run import run_machine
from properties.signatures import difference_shape, signature_text
from sim.errors import HarnessError
from sim.targets import make, parse_target


def failure(property: str, config: dict, steps: list[tuple[str, str | None]],
            setup: tuple[str, ...] = (), message: str | None = None,
            error: BaseException | None = None) -> Failure:
    text = f"{property}: {message}" if message else property
    return Failure(property, text, Trace(list(setup), config, None,
                                         [Step(call, expect, "") for call, expect in steps]),
                   error or AssertionError(text))


STALE = [("cache.can_allocate(r0, 0)", "True"), ("cache.allocate(r0, 0)", None),
         ("cache.free(r0)", None), ("cache.can_allocate(r0, 1)", "True"),
         ("cache.get_freed_mm_hashes()", "[]")]
STALE_SAYS = "['img1'] reported freed but resident"


def test_one_cause_one_id_whatever_the_layout_sizes_or_names():
    one = failure("freed-not-resident", {"cache_size": 1, "target": "native:enc-stale-freed"},
                  STALE, setup=("r0 = ReqView('r0', (img0, img1))",), message=STALE_SAYS)
    # Two requests instead of one carrying two items, a bigger cache, other ids, a longer
    # program before the failing pass end, two stale hashes: the same cause, one finding.
    other = failure("freed-not-resident", {"cache_size": 3, "target": "vllm"},
                    [("cache.reset()", None), *[(c.replace("r0, 1", "r1, 0")
                                                 .replace("r0", "r3"), e) for c, e in STALE]],
                    setup=("r3 = ReqView('r3', (img5,))", "r1 = ReqView('r1', (img7,))"),
                    message="['img7', 'img5'] reported freed but resident")
    assert finding_id("encoder_cache", one) == finding_id("encoder_cache", other)
    assert finding_id("encoder_cache", one).startswith("encoder_cache/freed-not-resident/")
    assert signature(one) == "freed-not-resident | [...] reported freed but resident"
    # The programs differ, so the group lists two examples.
    assert program_id("encoder_cache", one) != program_id("encoder_cache", other)
    assert "native" not in normalized_program(one)
    # A count that differs by another amount, in the same direction: one finding.
    counts = [failure("slots-agree", {}, STALE[:3], message=f"num_freeable_slots {a} != {b}")
              for a, b in ((1, 0), (7, 3))]
    assert finding_id("encoder_cache", counts[0]) == finding_id("encoder_cache", counts[1])


@pytest.mark.parametrize("change", ["property", "call", "direction", "field", "shape",
                                    "exception"])
# (A state check's failing *step* is not part of its signature: see the next test.)
def test_a_second_cause_gets_its_own_id(change):
    base = failure("slots-agree", {"cache_size": 1}, STALE[:3],
                   message="num_freeable_slots 1 != 0")
    other = {
        "property": lambda: attrs.evolve(base, property="returns-agree",
                                         message="returns-agree: num_freeable_slots 1 != 0"),
        "call": lambda: failure("slots-agree", {"cache_size": 1}, STALE[:3],
                                message="allocate returned True, the model expects False"),
        "direction": lambda: failure("slots-agree", {"cache_size": 1}, STALE[:3],
                                     message="num_freeable_slots 0 != 1"),
        "field": lambda: failure("slots-agree", {"cache_size": 1}, STALE[:3],
                                 message="num_free_slots 1 != 0"),
        "shape": lambda: failure("slots-agree", {"cache_size": 1}, STALE[:3],
                                 message="['img0'] reported freed but resident"),
        "exception": lambda: failure("no-raise", {"cache_size": 1}, STALE[:3],
                                     message="KeyError", error=KeyError("img0")),
    }[change]()
    assert finding_id("encoder_cache", base) != finding_id("encoder_cache", other)


def test_one_planted_bug_laid_out_several_ways_is_one_finding():
    """ARC's inverted REPLACE (``native:arc-replace-inverted``): the minimizer lays it out in
    several programs over seeds (the wrong order shows after a ``touch`` in some, after a
    ``complete_store`` in others): several examples, one finding."""
    programs, findings = set(), set()
    for seed in range(8):
        found = run_machine(machine_for("tiered_lookup"), "native:arc-replace-inverted",
                            settings(settings.get_profile("ci"), max_examples=200,
                                     derandomize=False, phases=[Phase.explicit,
                                                                Phase.generate]),
                            seed=seed).failure
        if found is None:         # (an ARC world is drawn in some runs only)
            continue
        programs.add(program_id("tiered_lookup", found))
        findings.add(finding_id("tiered_lookup", found))
    assert len(programs) >= 3, programs
    assert len(findings) == 1, findings


def test_a_crash_read_from_its_message_has_the_signature_of_its_error():
    # A suite's crash reaches history as its message (``message_of``); a hunt's, with its
    # error: one signature, as ``signature_text`` spells it from the error.
    message = ("no-raise: vLLM raised AssertionError:  (at vllm/v1/core/kv_cache_utils.py:1262 "
               "in resolve_block_hashes)")
    assert signature_text("no-raise", message) == \
        "no-raise | AssertionError at vllm/v1/core/kv_cache_utils.py in resolve_block_hashes"


def test_a_crash_is_grouped_by_its_type_and_where_it_raised():
    def raised(kind: type) -> BaseException:
        try:
            raise kind("img3")
        except kind as error:
            return error
    crashes = [failure("no-raise", {}, STALE[:3], message=f"KeyError: '{n}'",
                       error=raised(KeyError)) for n in ("img0", "img3")]
    assert finding_id("encoder_cache", crashes[0]) == finding_id("encoder_cache", crashes[1])
    assert "KeyError at" in signature(crashes[0])
    other = failure("no-raise", {}, STALE[:3], message="IndexError", error=raised(IndexError))
    assert finding_id("encoder_cache", other) != finding_id("encoder_cache", crashes[0])


@pytest.mark.parametrize("message, shape", [
    ("num_freeable_slots 1 != 0", "num_freeable_slots {value: more}"),
    ("r0 [0, 1] != [0]", "rN {value: extra}"),
    ("r1 [0] != []", "rN {value: extra}"),
    ("get_freed_mm_hashes returned ['img0'], the model expects []",
     "get_freed_mm_hashes returned {value: extra}"),
    ("prepare_store([1, 0, 3]) evicted [3] (pinned, write-pending or offered)",
     "prepare_store(...) evicted [...] (pinned, write-pending or offered)"),
    ("(free, freeable) embeds (1, 2) != (1, 1): an input held or freed out of turn",
     "(free, freeable) embeds {[1]: more}"),
    ("sliding_window_lookup returned None after looking up [2, 1, 3, 0] (answers "
     "(LookupResult.MISS, LookupResult.HIT_PENDING, LookupResult.MISS, LookupResult.MISS)), "
     "expected 0", "sliding_window_lookup returned {value: None vs N}"),
    ("sliding_window_lookup looked up [2, 3, 1], expected [2, 3] (answers (LookupResult.RETRY,"
     " LookupResult.MISS, LookupResult.MISS), expected (LookupResult.RETRY, LookupResult.MISS))",
     "sliding_window_lookup looked up {value: extra}"),
    ("step StepView(output=View(tokens={'r0': 3}, inputs={'r0': (0,)}), done=('r0',)) != "
     "StepView(output=View(tokens={'r0': 2}, inputs={}), done=())",
     "step {done: extra, output.inputs: extra key, output.tokens['rN']: more}"),
    # A scenario's check (``properties/scenarios.py: agrees``) and the prefix-cache machine's
    # free queue, out of order alike.
    ("(3, 4, 2, 1) != expected (2, 1, 3, 4)", "{value: order}"),
    ("free_queue() returned (2, 1), the model expects (1, 2)",
     "free_queue() returned {value: order}"),
    # The prefix-cache machine's events compared by the blocks stored: two layouts of one
    # extra report, one shape.
    ("take_events returned {'stored': [(0, (10,))]}, the model expects {'stored': []}",
     "take_events returned {['stored']: extra}"),
    ("take_events returned {'stored': [(1, ('a', 10, 11)), (1, ('a', 10))]}, the model "
     "expects {'stored': []}", "take_events returned {['stored']: extra}"),
    # A per-group answer compared group by group: the connector's extra block in a pool of
    # one group or two, and a hit cut short in two groups or three (the windows' blocks of
    # a shorter hit differ), one shape each.
    ("connector_finished returned (1, 2), the model expects (1,)",
     "connector_finished returned {value: extra}"),
    ("connector_finished returned ((1, 6), (2, 3, 4, 5)), the model expects "
     "((1,), (2, 3, 4, 5))", "connector_finished returned {value: extra}"),
    ("get_computed_blocks returned Hit(block_ids=((), ()), num_computed_tokens=0), the model "
     "expects Hit(block_ids=((1,), (3, 4)), num_computed_tokens=2)",
     "get_computed_blocks returned {block_ids: missing, num_computed_tokens: less}"),
    ("get_computed_blocks returned Hit(block_ids=((1,), (3, 4, 5), (0, 9, 10)), "
     "num_computed_tokens=3), the model expects Hit(block_ids=((1, 2), (3, 4, 5, 6, 7, 13), "
     "(0, 0, 0, 0, 12, 15)), num_computed_tokens=6)",
     "get_computed_blocks returned {block_ids: missing, num_computed_tokens: less}"),
])
def test_the_shape_of_a_difference(message, shape):
    assert difference_shape(message) == shape


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
        "encoder_cache/freed-not-resident/fdaf27e5"     # the fixtures name it


def test_curated_reproducers_name_their_findings():
    root = Path(__file__).resolve().parents[1] / "fixtures" / "reproducers"
    assert parse_accept(str(root / "test_encoder_cache_vllm_stale_freed.py")) == [
        "encoder_cache/freed-not-resident/fdaf27e5"]
    # Both programs hunts found for the repeated item (freeing input 0, or input 1 never
    # recorded) are one cause now: one id.
    assert parse_accept(str(root / "test_encoder_cache_vllm_repeat_item.py")) == [
        "encoder_cache/slots-agree/8bacf8d4"]
    assert parse_accept(str(root / "test_encoder_cache_vllm_repeat_item.py"), check=False) == [
        "encoder_cache/slots-agree/8bacf8d4"]
