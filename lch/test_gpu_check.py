"""``tools/gpu_check.sh``'s verdicts (``lch/gpu_check.py``) on what a step leaves, and its
pytest plugin's per-test lines (``lch/gpu_check_plugin.py``), through pytest itself, with
xdist too. A step that ran no test is never a PASS, nor one that passed without showing what
it claims (CUDA worlds, real streams, delays); a selection that names nothing fails.
The script's own behaviour, with a fake CUDA python: ``properties/test_gpu_check.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lch import gpu_check
from lch.gpu_check import FAIL, PASS, SKIP, STEPS, judge_hunt, judge_pytest

SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "gpu_check.sh"
CUDA_TALLY = {"offload_data": {"cuda/async": 40, "cuda/sync": 30},
              "streams": {"CudaStreams": 40, "SyncStreams": 30},
              "cuda_sleeps": 900, "sleep_cycles": {"200000": 500, "2000000": 400}}


def test_the_scripts_steps_are_the_ones_judged():
    lines = SCRIPT.read_text().splitlines()
    assert [line.split()[1] for line in lines if line.startswith("step ")] == list(STEPS)
    for step in STEPS.values():           # each required test is named in the script
        for nodeid in step.tests:
            path, test = nodeid.split("::")
            assert test in SCRIPT.read_text() or path in SCRIPT.read_text(), nodeid


# -- the verdicts, on what a step leaves ------------------------------------------------------

def passed(nodeid: str, **tally) -> dict:
    return {"nodeid": nodeid, "outcome": "passed", "duration_s": 1.0,
            "gpu_check_tally": tally or CUDA_TALLY}


NATIVE = STEPS["offload-native"]
MACHINE_TEST = NATIVE.tests[0]


def test_a_step_that_ran_no_test_is_a_skip_never_a_pass():
    skipped = {"nodeid": "properties/test_x.py::test_y", "outcome": "skipped",
               "duration_s": 0.0, "message": "Skipped: needs CUDA"}
    step = gpu_check.Step("any", "anything")
    assert judge_pytest(step, 0, "1 skipped in 1.0s", [skipped], []) == \
        (SKIP, "1 skipped: ran no test: needs CUDA")
    outcome, why = judge_pytest(NATIVE, 0, "1 skipped in 1.0s", [{**skipped,
                                                                  "nodeid": MACHINE_TEST}], [])
    assert outcome == SKIP and "1 of 1 required tests could not run: needs CUDA" in why


def test_a_selection_that_names_nothing_or_misses_a_required_test_fails():
    assert judge_pytest(NATIVE, 5, "no tests ran in 0.1s", [], [])[0] == FAIL
    outcome, why = judge_pytest(NATIVE, 0, "1 passed in 1.0s",
                                [passed("properties/test_other.py::test_z")], [])
    assert outcome == FAIL and "required tests did not run" in why
    assert judge_pytest(NATIVE, 0, "1 passed in 1.0s", [], [])[0] == FAIL   # no plugin lines


def test_a_pass_without_cuda_worlds_streams_or_delays_is_a_failure():
    on_cpu = passed(MACHINE_TEST, offload_data={"cpu/async": 5, "cpu/sync": 5},
                    streams={"SimStreams": 5, "SyncStreams": 5})
    outcome, why = judge_pytest(NATIVE, 0, "1 passed in 1.0s", [on_cpu], [])
    assert outcome == FAIL and "did not check what it claims" in why
    assert "every offload world on CUDA" in why and "simulated device" in why
    no_delay = passed(MACHINE_TEST, **{**CUDA_TALLY, "cuda_sleeps": 0})
    outcome, why = judge_pytest(NATIVE, 0, "1 passed in 1.0s", [no_delay], [])
    assert outcome == FAIL and why.endswith("not shown: side-stream delays queued "
                                            "(torch.cuda._sleep) (the tests' tallies are in "
                                            "the record)")
    assert judge_pytest(NATIVE, 0, "1 passed in 1.0s", [passed(MACHINE_TEST)], []) == \
        (PASS, "1 passed")


def test_a_divergence_names_its_property_and_reproducer():
    failed = {"nodeid": MACHINE_TEST, "outcome": "failed", "duration_s": 1.0, "message": "E x"}
    divergence = {"nodeid": MACHINE_TEST, "outcome": "divergence",
                  "property": "attention-reads-agree", "calls": 3, "reproducer": "r.py"}
    outcome, why = judge_pytest(NATIVE, 1, "1 failed in 1.0s", [failed], [divergence])
    assert outcome == FAIL
    assert why == (f"1 failed: divergence attention-reads-agree in {MACHINE_TEST} (3 calls, "
                   "reproducer r.py)")


def hunt_report(examples: int = 100, events: dict | None = None,
                findings: list | None = None) -> dict:
    return {"pairs": [{"subsystem": "offload_engine", "target": "native", "result": "x",
                       "examples": examples, "steps": 10 * examples, "events": events or {},
                       "findings": findings or []}]}


def test_hunt_verdicts():
    assert judge_hunt(0, hunt_report()) == (PASS, "100 examples, 1000 steps, no failure")
    assert judge_hunt(0, hunt_report(examples=0))[0] == SKIP
    assert judge_hunt(3, hunt_report(examples=0))[0] == SKIP
    assert judge_hunt(0, None)[0] == SKIP
    simulated = judge_hunt(0, hunt_report(events={"copy ran out of order": 2}))
    assert simulated[0] == FAIL and "simulated device" in simulated[1]
    found = judge_hunt(1, hunt_report(findings=[{"id": "offload_engine/p/1", "calls": 4,
                                                 "reproducer": "r.py"}]))
    assert found == (FAIL, "100 examples, 1000 steps: divergence offload_engine/p/1 (4 calls, "
                           "reproducer r.py)")
    assert judge_hunt(2, hunt_report())[0] == FAIL


def test_the_record_is_named_for_the_device():
    assert gpu_check.device_name_slug("NVIDIA H200") == "h200"
    assert gpu_check.device_name_slug("Fake GPU") == "fake-gpu"


# -- the plugin's per-test lines, through pytest ----------------------------------------------

PLUGIN_TESTS = """
import pytest
import torch
from sim.native.offload_engine.data import OffloadData


@pytest.mark.parametrize("async_mode", [False, True])
def test_builds_a_data_plane(async_mode, record_property):
    OffloadData(1, 2, 2, 1, torch.device("cpu"), async_mode=async_mode)
    record_property("vllm_copy_op", "stand-in")


def test_skips():
    pytest.skip("needs CUDA")
"""


# Under xdist the lines are written by the controller from the workers' reports (as on the
# GPU machine, where the steps run with -n): slow, as a subprocess pytest starting workers is.
@pytest.mark.parametrize("workers", [[], pytest.param(["-n", "2"], marks=pytest.mark.slow)],
                         ids=["alone", "xdist"])
def test_the_plugin_writes_one_line_per_test_with_what_it_ran_on(pytester, tmp_path, workers):
    pytest.importorskip("torch")
    pytester.makepyfile(test_plugin=PLUGIN_TESTS)
    lines = tmp_path / "tests.jsonl"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p",
                                           "lch.gpu_check_plugin", "--gpu-check-tests",
                                           str(lines), *workers)
    result.assert_outcomes(passed=2, skipped=1)
    tests = {t["nodeid"].split("::")[-1]: t for t in gpu_check.read_lines(lines)}
    assert sorted(tests) == ["test_builds_a_data_plane[False]",
                             "test_builds_a_data_plane[True]", "test_skips"]
    sync, asynchronous = tests["test_builds_a_data_plane[False]"], \
        tests["test_builds_a_data_plane[True]"]
    assert sync["gpu_check_tally"] == {"offload_data": {"cpu/sync": 1},
                                       "streams": {"SyncStreams": 1}}
    assert asynchronous["gpu_check_tally"] == {"offload_data": {"cpu/async": 1},
                                               "streams": {"SimStreams": 1}}
    assert sync["vllm_copy_op"] == "stand-in"
    assert tests["test_skips"]["outcome"] == "skipped"
    assert "needs CUDA" in tests["test_skips"]["message"]


def test_the_vllm_steps_line_says_which_copy_ran():
    step = STEPS["vllm-offload-worker"]
    paths = {"store": {"direction": "gpu->cpu", "chosen": "x",
                       "ran": {"torch stand-in for swap_blocks_batch (why)": 4}},
             "load": {"direction": "cpu->gpu", "chosen": "y",
                      "ran": {"vLLM's Triton kernel (swap_blocks_triton._swap_blocks_kernel)": 2,
                              "torch stand-in for swap_blocks_batch (why)": 3}},
             "expedited load": {"direction": "cpu->gpu", "chosen": "y", "ran": {}}}
    tests = [{"nodeid": n, "outcome": "passed", "duration_s": 1.0, "vllm_copy_paths": paths}
             for n in step.tests]
    assert judge_pytest(step, 0, "3 passed, 1 skipped in 9.0s", tests, []) == (PASS, (
        "3 passed, 1 skipped; copy paths: store (gpu->cpu): torch stand-in for "
        "swap_blocks_batch x8; load (cpu->gpu): torch stand-in for swap_blocks_batch x6, "
        "vLLM's Triton kernel x4; expedited load (cpu->gpu): nothing ran"))
    without = [{k: v for k, v in t.items() if k != "vllm_copy_paths"} for t in tests]
    outcome, why = judge_pytest(step, 0, "2 passed in 9.0s", without, [])
    assert outcome == FAIL and "vLLM's copy paths recorded" in why


def test_the_commit_a_tree_was_carried_at_is_the_record_s():
    from lch.gpu_check import carried_commit
    clean = carried_commit("commit 1b93f40\nuncommitted changes to 0 tracked files when .whl "
                           "was built\n")
    assert clean["commit"] == "1b93f40" and clean["dirty"] is False
    assert carried_commit("commit abc\nuncommitted changes to 3 tracked files when .whl was "
                          "built")["dirty"] is True
