"""The witness record (``python -m lch.witnesses``): one item per declared property with its
witnesses, one per suite; a failing suite or an unwitnessed property makes it exit 1; the
docs block renders it. The suites themselves are stubbed here (they are run by the fast tier
and ``nox -s vllm``)."""

from __future__ import annotations

import json

from lch import record_blocks, witnesses


def _suite(outcome):
    def run_suite(name, args, env):
        return {"id": f"suite {name}", "suite": name, "command": "pytest", "outcome": outcome,
                "wall_s": 1.0, "counts": {"passed": 3}, "summary_line": "3 passed in 1.0s"}
    return run_suite


def test_the_record_names_every_property_and_its_witnesses(monkeypatch, tmp_path):
    monkeypatch.setattr(witnesses, "run_suite", _suite("pass"))
    assert witnesses.main(["--record-dir", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "witnesses" / "property-witnesses.json").read_text())
    rows = [i for i in record["items"] if "property" in i]
    assert record["summary"]["unwitnessed"] == [] and len(rows) == record["summary"]["properties"]
    budgets = next(r for r in rows if r["property"] == "budgets-hold")
    assert budgets["subsystem"] == "scheduler_pass"
    assert budgets["scenario"] == ["scheduler-budget-per-request"]
    assert {r["property"] for r in rows if r["subsystem"] == ""} == {"check-valid", "no-raise"}
    text = record_blocks.property_witnesses(tmp_path)
    assert "`budgets-hold`" in text and "fast suite pass in 1.0 s" in text


def test_a_failing_suite_fails_the_command(monkeypatch, tmp_path):
    monkeypatch.setattr(witnesses, "run_suite", _suite("fail"))
    assert witnesses.main(["--record-dir", str(tmp_path)]) == 1
