"""A subsystem's further machines (its manifest's ``machines``) in the hunt: each is a pair
of its own, ``<subsystem>.<machine>``, planned only with the targets it builds, hunted like a
subsystem's machine, and its findings named by it (so the main machine's ids stay what they
were). The CLI runs in a real subprocess, as in ``test_hunt_cli.py``, with small budgets."""

from __future__ import annotations

import importlib.util

import pytest

from lch.cli import planned_machines
from lch.coverage import NOT_IMPLEMENTED, RUN, plan
from properties.test_hunt_cli import cli, pairs, report

HAS_VLLM = importlib.util.find_spec("vllm") is not None
# A seed whose 60 examples meet the bug (seed 1 stopped doing so when the KV worlds began
# drawing their admission gate and watermark): the test is about the finding's name.
KV_HUNT = ("hunt", "--target", "native:sched-kv-preempts-self", "--subsystem",
           "scheduler_pass.kv_pressure", "--examples", "60", "--no-db", "--seed", "2",
           "--reproducer-dir", "found")


def test_a_further_machine_is_planned_only_with_the_targets_it_builds():
    planned = {(p.subsystem, p.target): p for p in plan(["native"], None, planned_machines())}
    tiering = planned[("tiered_lookup.tiering", "native")]
    assert tiering.status == NOT_IMPLEMENTED and "--target vllm" in tiering.why
    assert planned[("tiered_lookup", "native")].status == RUN
    assert planned[("scheduler_pass.kv_pressure", "native")].status == RUN


@pytest.mark.skipif(not HAS_VLLM, reason="the tiering layer's machine drives vLLM alone")
@pytest.mark.parametrize("engine", ["hypothesis", "explore"])
def test_the_tiering_machine_is_hunted_on_vllm(tmp_path, engine):
    done = cli("hunt", "--target", "vllm", "--subsystem", "tiered_lookup.tiering",
               "--examples", "10", "--no-db", "--seed", "1", "--engine", engine, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    (pair,) = report(tmp_path)["pairs"]
    assert (pair["subsystem"], pair["result"]) == ("tiered_lookup.tiering", "no failure")
    assert pair["examples"] >= 10 and pair["steps"] > 10
    assert "tiered_lookup.tiering x vllm" in (tmp_path / "hunt-report.md").read_text()


def test_a_further_machines_finding_is_named_by_it_and_accepted_by_that_name(tmp_path):
    done = cli(*KV_HUNT, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    pair = pairs(report(tmp_path))[("scheduler_pass.kv_pressure",
                                    "native:sched-kv-preempts-self")]
    (found,) = pair["findings"]
    assert found["id"].startswith("scheduler_pass.kv_pressure/pass-maximal/"), found
    assert all(p.startswith("scheduler_pass.kv_pressure/") for p in found["programs"])
    # The reproducer names the same id, so --accept takes the file too.
    reproducer = tmp_path / found["reproducer"]
    assert f"FINDING = {found['id']!r}" in reproducer.read_text()
    assert "--subsystem scheduler_pass.kv_pressure" in (tmp_path / "hunt-report.md").read_text()
    done = cli(*KV_HUNT, "--accept", str(reproducer), "--report-dir", "again", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    (again,) = report(tmp_path / "again")["pairs"]
    assert again["findings"] == [] and again["result"] == "accepted only"
    assert [(a["id"], a["seen"] > 0) for a in again["accepted"]] == [(found["id"], True)]


def test_a_bad_machine_name_ends_in_one_line_naming_the_choices(tmp_path):
    done = cli("hunt", "--subsystem", "tiered_lookup.tierin", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert "invalid choice: 'tiered_lookup.tierin'" in last
    assert "'tiered_lookup.tiering'" in last and "'scheduler_pass.kv_pressure'" in last
