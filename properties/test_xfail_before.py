"""A curated reproducer's strict xfail (``sim.vllm.release.xfail_before``) counts only a
property failure as the bug reproducing: a reproducer whose world cannot be built, or whose
calls no longer fit the release, fails instead of passing as "still reproduces"."""

from __future__ import annotations

import textwrap

from sim.vllm import release

REPRODUCER = textwrap.dedent('''
    import pytest

    from sim.errors import AdapterError, TargetUnavailable
    from sim.vllm.release import xfail_before

    TARGETS = [pytest.param("vllm", marks=xfail_before(None, "the bug", since="0.10.2"))]


    @pytest.mark.parametrize("target", TARGETS)
    def test_the_property_fails(target):
        assert 1 + 1 == 3, "liveness: r0 unfinished"


    @pytest.mark.parametrize("target", TARGETS)
    def test_the_world_cannot_be_built(target):
        raise AdapterError("building the vllm scheduler_pass failed: TypeError: ...")


    @pytest.mark.parametrize("target", TARGETS)
    def test_the_target_is_missing(target):
        raise TargetUnavailable("vLLM is installed but `import x` failed")


    @pytest.mark.parametrize("target", TARGETS)
    def test_a_call_no_longer_fits(target):
        raise TypeError("__init__() got an unexpected keyword argument 'block_size'")
''')


def test_only_a_property_failure_counts_as_reproducing(pytester, monkeypatch):
    monkeypatch.setattr(release, "installed_release", lambda: "0.33.0")   # an affected one
    pytester.makepyfile(test_reproducer=REPRODUCER)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(xfailed=1, failed=3)
    result.stdout.fnmatch_lines(["*FAILED*test_the_world_cannot_be_built*",
                                 "*FAILED*test_the_target_is_missing*",
                                 "*FAILED*test_a_call_no_longer_fits*"])


def test_a_release_the_bug_predates_skips(pytester, monkeypatch):
    monkeypatch.setattr(release, "installed_release", lambda: "0.10.1")
    pytester.makepyfile(test_reproducer=REPRODUCER)
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "-q").assert_outcomes(skipped=4)
