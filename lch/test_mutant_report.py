"""A campaign's report and record (``lch/mutant_report.py``) from made-up outcomes: only
``killed`` is in the score, every other outcome has its column in the JSON and the markdown,
a suite that could not run has no number, the record round-trips through ``lch.records`` and
the ``mutation-scores`` block renders it."""

from __future__ import annotations

import json

from lch import mutant_report, records
from lch.mutants import Argued
from lch.mutate import Mutant
from lch.record_blocks import mutation_scores
from lch.suites import Run

SPEC = "vllm.v1.core.encoder_cache_manager:EncoderCacheManager"
OUTCOMES = ["killed", "survived", "timeout", "crash", "unavailable", "unnamed", "error",
            "killed"]


def mutants(n: int) -> list[Mutant]:
    return [Mutant(i, "allocate", 200 + i, "delete", f"x{i} = 1", "pass", ("delete", i))
            for i in range(n)]


def outcome(name: str, **extra) -> dict:
    result = {"outcome": name, "seconds": 1.0, "cpu_seconds": 0.5, **extra}
    if name == "killed":
        result.update(test="properties/test_encoder_cache.py::test_machine[vllm]",
                      property="slots-agree", message="slots-agree: 1 != 0")
    elif name not in ("survived",):
        result.update(test="t.py::t", message=f"why it is {name}", failures={name: 1})
    return result


def campaign(could_not_run: dict | None = None) -> dict:
    everything = mutants(len(OUTCOMES) + 1)           # the last one argued equivalent
    argued = Argued({everything[-1].diff: "no caller reads it."},
                    {everything[1].diff: "the harness never compared it; a caller can."}, [])
    runs = {"harness": Run(["--target", "vllm", "p.py"], None, "harness", ("p.py",)),
            "upstream": Run(["u.py"], None, "upstream", ("tests/u.py",))}
    results = {m.id: {"harness": outcome(o), "upstream": outcome("killed")}
               for m, o in zip(everything, OUTCOMES, strict=False)}
    baseline = {name: {"wall": 10.0, "cpu": 5.0} for name in runs}
    could_not_run = could_not_run or {}
    for name in could_not_run:
        for r in results.values():
            r.pop(name)
    return mutant_report.build(SPEC, "0.33.0", everything, everything, argued, runs, baseline,
                               could_not_run, results, wall_s=12.3)


def test_only_a_kill_is_in_the_score_and_every_outcome_has_its_column():
    report = campaign()
    harness = report["suites"]["harness"]
    assert (harness["killed"], harness["of"], harness["score_percent"]) == (2, 8, 25.0)
    assert {o: harness[o] for o in ("survived", "timeout", "crash", "unavailable", "unnamed",
                                    "error")} == dict.fromkeys(
        ("survived", "timeout", "crash", "unavailable", "unnamed", "error"), 1)
    # the old rule counted every failure, a timeout and a crash: all but the survivor
    assert harness["any_failure"] == 7
    assert harness["kills_by_property"] == {"slots-agree": 2}
    assert harness["equivalent"] == 1 and harness["equivalents_run"] == 0
    assert report["formerly_equivalent"] == 1
    assert report["only_upstream"] == ["m001", "m002", "m003", "m004", "m005", "m006"]
    markdown = mutant_report.render_markdown(report)
    assert "| suite | killed | score | survived | timeout | crash | unavailable | unnamed | " \
           "error | equivalent | any failure |" in markdown
    assert "| harness | 2 / 8 | 25.0% | 1 | 1 | 1 | 1 | 1 | 1 | 1 | 7 / 8 |" in markdown
    assert "- m004 unavailable: `allocate L204: x4 = 1  ->  pass` (t.py::t: why it is " \
           "unavailable)" in markdown
    assert "the harness never compared it; a caller can." in markdown


def test_a_suite_that_could_not_run_has_no_number():
    report = campaign(could_not_run={"upstream": "the upstream suite fails without any "
                                                 "mutant (error: ...)"})
    assert report["suites"]["upstream"] == {"tests": ["tests/u.py"], "could_not_run":
                                            "the upstream suite fails without any mutant "
                                            "(error: ...)"}
    assert "only_harness" not in report
    assert "| upstream | could not run: the upstream suite fails" in \
           mutant_report.render_markdown(report)


def test_the_record_round_trips_and_the_block_renders_it(tmp_path):
    report = campaign()
    record = mutant_report.record(report, "python -m lch.mutants --class X", {"version":
                                  "0.33.0"}, records.now())
    path = records.write(record, tmp_path)
    assert path == tmp_path / "mutants" / "EncoderCacheManager-0.33.0.json"
    [back] = records.load("mutants", tmp_path)
    assert back == json.loads(json.dumps(record))
    suites = back["summary"]["suites"]
    assert suites["harness"]["killed"] == 2 and suites["harness"]["unnamed"] == 1
    item = back["items"][0]
    assert item["harness"] == {"outcome": "killed", "seconds": 1.0, "property": "slots-agree",
                               "test": "properties/test_encoder_cache.py::test_machine[vllm]"}
    assert back["items"][4]["harness"]["message"] == "why it is unavailable"
    assert back["items"][1]["formerly_equivalent"] and back["items"][-1]["equivalent"]
    # the old code's record of the same class shows beside it
    old = dict(record, summary={**record["summary"], "suites": {
        "harness": {"killed": 8, "of": 8}, "upstream": {"killed": 7, "of": 8}}})
    (tmp_path / "mutants" / "old-rule").mkdir()
    (tmp_path / "mutants" / "old-rule" / "EncoderCacheManager-0.33.0.json").write_text(
        json.dumps(old))
    table = mutation_scores(tmp_path)
    assert "| `EncoderCacheManager` | 9 (1) | this harness | 2 / 8 | 25.0% | 1 | 1 | 1 | 1 " \
           "| 1 | 1 | 7 / 8 | 8 / 8 (`results/mutants/old-rule/EncoderCacheManager-0.33.0" \
           ".json`) | `results/mutants/EncoderCacheManager-0.33.0.json` |" in table
    assert "| vLLM's own tests | 8 / 8 | 100.0% |" in table


def test_a_suite_that_could_not_run_renders_as_such(tmp_path):
    report = campaign(could_not_run={"upstream": "its models are not offline"})
    records.write(mutant_report.record(report, "c", None, records.now()), tmp_path)
    table = mutation_scores(tmp_path)
    assert "| vLLM's own tests | could not run: its models are not offline |" in table
    assert table.count("| `EncoderCacheManager` |") == 2
