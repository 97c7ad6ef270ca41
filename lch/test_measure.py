"""``python -m lch.measure``: each measurement lands in a record with the figures it printed."""

from __future__ import annotations

import json

from lch import measure


def _record(tmp_path, kind: str, name: str) -> dict:
    return json.loads((tmp_path / kind / f"{name}.json").read_text())


def test_sizes_counts_lines_at_the_base_and_now(tmp_path):
    assert measure.main(["sizes", "--base", "HEAD", "--name", "s", "--record-dir",
                         str(tmp_path), "lch/measure.py"]) == 0
    record = _record(tmp_path, "sizes", "s")
    lines = len(measure.records.ROOT.joinpath("lch/measure.py").read_text().splitlines())
    assert record["items"][0]["file"] == "lch/measure.py"
    assert record["summary"]["totals"]["lch/measure.py"]["lines"] == lines


def test_pytest_outcomes_per_test(tmp_path):
    test = tmp_path / "test_demo.py"
    test.write_text("def test_ok():\n    pass\n\n\ndef test_bad():\n    assert False\n")
    code = measure.main(["pytest", "--name", "p", "--record-dir", str(tmp_path), "--", "-q",
                         "-p", "no:cacheprovider", str(test)])
    record = _record(tmp_path, "suites", "p")
    assert code == 1 and record["summary"]["passed"] == 1 and record["summary"]["failed"] == 1
    assert {i["test"].split("::")[-1]: i["outcome"] for i in record["items"]} == {
        "test_ok": "passed", "test_bad": "failed"}


def test_the_command_carries_the_settings_the_outcomes_depend_on(monkeypatch, tmp_path):
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")
    monkeypatch.setenv("LCH_EXPECT_KNOWN", "1")
    test = tmp_path / "test_env_demo.py"
    test.write_text("def test_ok():\n    pass\n")
    measure.main(["pytest", "--name", "e", "--record-dir", str(tmp_path), "--", "-q",
                  "-p", "no:cacheprovider", str(test)])
    command = _record(tmp_path, "suites", "e")["command"]
    assert command.startswith("HYPOTHESIS_PROFILE=ci LCH_EXPECT_KNOWN=1 ")
    assert " python -m lch.measure pytest --name e " in command


def test_a_run_against_vllm_names_the_release_also_when_workers_import_it():
    assert measure._targets_vllm(["-q", "--target", "vllm", "x.py"])
    assert measure._targets_vllm(["--target=vllm"])
    assert not measure._targets_vllm(["--target", "native", "x.py", "vllm"])


def test_pytest_records_the_known_divergences_its_xfails_name(tmp_path):
    test = tmp_path / "test_known_demo.py"   # not test_demo: pytest caches that module
    test.write_text(
        "import pytest\n\n\n"
        "def test_known():\n"
        "    pytest.xfail('vLLM 0.33.0: known divergence pc-dcp-connector-clip (...)')\n\n\n"
        "@pytest.mark.xfail(reason='pc-dcp-connector-clip-like, no id of ours', strict=True,\n"
        "                   raises=AssertionError)\n"
        "def test_other():\n"
        "    assert False\n")
    measure.main(["pytest", "--name", "k", "--record-dir", str(tmp_path), "--", "-q",
                  "-p", "no:cacheprovider", str(test)])
    record = _record(tmp_path, "suites", "k")
    assert record["summary"]["xfailed"] == 2
    assert list(record["summary"]["known_divergences"]) == ["pc-dcp-connector-clip"]
    assert record["summary"]["known_divergences"]["pc-dcp-connector-clip"][0].endswith(
        "::test_known")


def test_hazard_rates_per_machine_and_hazard(tmp_path):
    spec = "properties.encoder_cache_machine:EncoderCacheMachine"
    assert measure.main(["hazards", "--seeds", "0", "--examples", "3", "--name", "h",
                         "--record-dir", str(tmp_path), spec]) == 0
    record = _record(tmp_path, "hazards", "h")
    from properties.encoder_cache_machine import EncoderCacheMachine
    assert [i["hazard"] for i in record["items"]] == list(EncoderCacheMachine.HAZARDS)
    assert all(0 <= i["per_100"] <= 100 and i["failures"] == [] for i in record["items"])
    reached = [i for i in record["items"] if i["per_100"] > 0]
    assert reached and all(1 <= i["first_example"] <= i["examples"] for i in reached)
    assert all(i["first_example"] is None for i in record["items"] if i["per_100"] == 0)
    assert spec in measure.every_searched_machine()    # named none: every searched machine
