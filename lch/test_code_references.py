"""Every path the project's comments, docstrings, scripts and spec pages cite resolves, and
none cites the developer-only notes outside the repository (``lch/code_references.py``);
each kind of bad citation is shown caught on a made-up text."""

from __future__ import annotations

import pytest

from lch import code_references as refs


def test_every_citation_in_the_project_resolves():
    problems = refs.problems()
    assert not problems, "cited paths that do not resolve, or notes users do not have " \
        "(fix the citation: cite docs/specs/<page>.md or the module that says it):\n" + \
        "\n".join(map(str, problems))


def cited(source: str) -> list[str]:
    """The citations of a made-up Python source that the check rejects."""
    return [p.cited for p in refs.check_lines("made_up.py", refs.python_text(source))]


@pytest.mark.parametrize("source, bad", [
    ('"""See ``sim/vllm/no_such_adapter.py``."""\n', "sim/vllm/no_such_adapter.py"),
    ("# the rules: models/connector_scans.py\nx = 1\n", "models/connector_scans.py"),
    ('"""Machines: ``properties/*_no_such_machine.py``."""\n', "properties/*_no_such_machine.py"),
    ('"""Minimized by ``properties/harness.py:minimize``."""\n', "properties/harness.py:minimize"),
    ('"""Labelled by ``sim.outcomes.no_such_label``."""\n', "sim.outcomes.no_such_label"),
    ('"""Routed by ``sim.no_such_module``."""\n', "sim.no_such_module"),
])
def test_a_path_that_does_not_resolve_is_caught(source, bad):
    assert bad in cited(source)


@pytest.mark.parametrize("source, bad", [
    ('"""Written from ``specs/encoder-cache.md`` section 1."""\n', "specs/"),
    ("# DESIGN.md section 3: pass, divergence, could-not-run\n", "DESIGN.md"),
    ("# as STYLE.md says\n", "STYLE.md"),
    ('"""Written from ``../shared/specs``."""\n', "../shared"),
    ('"""Scenario (vllm-drive.md section 1)."""\n', "vllm-drive.md"),
    ("# the modules it drives (vllm-releases.md)\n", "vllm-releases.md"),
    # Banned in any string, data included: a catalogue entry's source is shown to users.
    ('SOURCE = "specs/offload-engine.md bug 3"\n', "specs/"),
])
def test_a_citation_of_the_developer_notes_is_caught(source, bad):
    assert bad in cited(source)


@pytest.mark.parametrize("source", [
    '"""See ``docs/specs/encoder-cache.md`` and ``sim/vllm/prefix_cache_compat.py``."""\n',
    '"""Every ``properties/*_machine.py``; records under ``results/<kind>/``."""\n',
    '"""Minimized by ``properties/run.py:minimize``; ``sim.outcomes.outside_label``."""\n',
    # vLLM's own paths are not the project's, even where a part of one matches a folder of ours
    '"""vLLM reads ``vllm/model_executor/models/qwen3_next.py``."""\n',
    # an output folder the harness creates (git ignores it)
    "# reproducers land in fixtures/reproducers/found/\n",
    # a data string, not a citation: a test's made-up path
    'PATH = "properties/test_x.py"\n',
])
def test_a_citation_that_resolves_or_is_no_citation_passes(source):
    assert cited(source) == []


def test_a_spec_page_link_to_no_page_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("")
    (tmp_path / "there.md").write_text("")
    lines = refs.plain_text("[ok](there.md), [gone](../nowhere.md#a) and `lch/no_such.py`\n")
    bad = [p.cited for p in refs.check_lines("page.md", lines, links_from=tmp_path)]
    assert bad == ["lch/no_such.py", "../nowhere.md"]
