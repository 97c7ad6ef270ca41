"""The mutation campaign's parts on a small class of our own (no vLLM): which mutants the
operators make, that a mutant runs on the live class, the forked runner's limits, and the
committed equivalent-mutant lists."""

from __future__ import annotations

import importlib.util
import sys
import time

import pytest

from lch import forked, mutate
from lch.mutants import EQUIVALENTS_DIR

SOURCE = '''
LIMIT = 3


def helper(x):
    return x + 1


class Base:
    def size(self):
        return 10


class Counter(Base):
    """Counts."""

    def __init__(self, start: int = 0):
        self.n = start

    def bump(self, by: int) -> int:
        """Adds ``by``."""
        if not by > 0:
            return -1
        self.n += by
        return self.n

    def full(self) -> bool:
        return self.n >= LIMIT and True

    def size(self):
        return super().size() - 1
'''


def diffs(source: str = SOURCE, name: str = "Counter") -> list[str]:
    return [m.diff for m in mutate.mutants(source, name)]


def test_the_operators_on_one_class_only():
    found = diffs()
    assert "bump L22: if not by > 0:  ->  if by > 0:" in found                  # not dropped
    assert "bump L22: if not by > 0:  ->  if not by >= 0:" in found             # comparison
    assert "bump L23: return -1  ->  return -2" in found                        # -(1 + 1)
    assert "bump L24: self.n += by  ->  self.n -= by" in found                  # arithmetic
    assert "bump L24: self.n += by  ->  pass" in found                          # deletion
    assert "full L28: return self.n >= LIMIT and True  ->  return self.n >= LIMIT and False" \
        in found                                                                # boolean
    assert "size L31: return super().size() - 1  ->  return super().size() - 2" in found
    assert "__init__ L17: def __init__(self, start: int = 0):  ->  " \
           "def __init__(self, start: int = 1):" in found                       # integer + 1
    # never: the docstrings, the annotations, the module's helper, another class
    assert not [d for d in found if "Adds" in d or "Counts" in d or "helper" in d]
    assert not [d for d in found if d.startswith("Base")]
    assert all(d.split()[0] in {"__init__", "bump", "full", "size"} for d in found)


def load(tmp_path, source: str = SOURCE):
    path = tmp_path / "lch_mutant_subject.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("lch_mutant_subject", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_mutant_runs_on_the_live_class(tmp_path):
    module = load(tmp_path)
    counter = module.Counter(1)                       # made before the mutant: sees it too
    alias = module.Counter                            # another module's import, say
    by_diff = {m.diff: m for m in mutate.mutants(SOURCE, "Counter")}
    mutate.apply(by_diff["bump L24: self.n += by  ->  self.n -= by"], module, module.Counter)
    assert module.Counter is alias
    assert counter.bump(2) == -1
    # super() in a mutated method still finds the real class's base
    mutate.apply(by_diff["size L31: return super().size() - 1  ->  return super().size() - 2"],
                 module, module.Counter)
    assert counter.size() == 8
    # the mutated code reports the real file and line
    assert module.Counter.bump.__code__.co_filename == str(tmp_path / "lch_mutant_subject.py")
    del sys.modules["lch_mutant_subject"]


def test_a_missing_class_is_named():
    with pytest.raises(LookupError, match="Missing"):
        mutate.mutants(SOURCE, "Missing")


def _loop() -> dict:
    while True:
        pass


def test_forked_tasks_report_and_a_loop_is_killed_by_its_cpu_limit(tmp_path):
    tasks = [forked.Task("ok", lambda: {"outcome": "survived"}, timeout_s=30),
             forked.Task("raises", lambda: 1 / 0, timeout_s=30),
             forked.Task("loops", _loop, timeout_s=0.5)]
    started = time.monotonic()
    done = {t.key: t for t in forked.run_all(tasks, jobs=2, workdir=tmp_path)}
    assert done["ok"].result == {"outcome": "survived"}
    assert done["raises"].result["outcome"] == "error"
    assert "ZeroDivisionError" in done["raises"].result["message"]
    assert done["loops"].result["outcome"] == "timeout"
    assert done["loops"].cpu_seconds >= 0.5
    assert time.monotonic() - started < 20


KINDS = {"same-behaviour", "cannot-fail", "never-used"}


@pytest.mark.parametrize("path", sorted(EQUIVALENTS_DIR.glob("*/*.toml")),
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_equivalent_mutant_is_argued(path):
    """An equivalent names the callers vLLM ships and why none can tell it from the original,
    and of what kind; a formerly argued one keeps its old argument and says who can tell."""
    tomllib = pytest.importorskip("tomllib")          # Python 3.11+, as vLLM itself
    text = tomllib.loads(path.read_text())
    entries, formerly = text["equivalent"], text.get("formerly", [])
    assert entries
    for entry in entries:
        assert set(entry) == {"mutant", "kind", "callers", "why"}, entry
        assert entry["kind"] in KINDS, entry
        assert entry["callers"].strip(), entry
    for entry in formerly:
        assert set(entry) == {"mutant", "argued", "observable"}, entry
    mutants = [e["mutant"] for e in entries + formerly]
    assert len(mutants) == len(set(mutants)), "one entry per mutant"
    for entry in entries + formerly:
        assert " L" in entry["mutant"] and "  ->  " in entry["mutant"], entry["mutant"]
        for text_ in (entry.get("why"), entry.get("argued"), entry.get("observable")):
            assert text_ is None or text_.strip().endswith("."), text_


SPINNING_SUITE = '''
import threading
import time


def test_quick():
    sum(range(10_000))


def test_poll_thread():
    # A poll loop that never sleeps, as a mutant can make one: it spins in a daemon thread
    # while the test waits on its result.
    done = threading.Event()

    def poll():
        while not done.is_set():
            pass

    threading.Thread(target=poll, daemon=True).start()
    done.wait(60)
'''


def test_a_test_past_its_own_cpu_budget_is_stopped_in_seconds(tmp_path):
    """The unmutated run measures each test's CPU; a mutant's run stops the test that spins
    at three times its own (+ 5 s), not at the whole suite's limit (``suites._TestClock``)."""
    from lch import suites
    (tmp_path / "test_spin.py").write_text(SPINNING_SUITE)
    args = ["-p", "no:xdist", "test_spin.py"]
    measured = forked.Task("measure", lambda: suites.run_pytest(
        ["--deselect", "test_spin.py::test_poll_thread", *args], tmp_path), timeout_s=60)
    [measured] = forked.run_all([measured], jobs=1, workdir=tmp_path / "runs")
    assert measured.result["outcome"] == "survived", measured.result
    test_cpu = measured.result["test_cpu"]
    assert set(test_cpu) == {"test_spin.py::test_quick"}
    budgets = {**test_cpu, "test_spin.py::test_poll_thread": 0.1}   # its "unmutated" CPU

    def run() -> dict:
        suites._TestClock.MARGIN_S = 0.5     # in the child only: 3 x 0.1 + 0.5 s of CPU
        return suites.run_pytest(args, tmp_path, budgets)
    [spun] = forked.run_all([forked.Task("spin", run, timeout_s=300)], jobs=1,
                            workdir=tmp_path / "runs")
    assert spun.result["outcome"] == "timeout", spun.result
    assert spun.result["test"] == "test_spin.py::test_poll_thread"
    assert spun.cpu_seconds < 10        # its own budget, not the child's 300 s


HANGING_SUITE = '''
import threading


def test_waits_for_a_poll_that_never_comes():
    # A mutant that stops a poll thread: the test waits in a loop, burning no CPU.
    never = threading.Event()
    while not never.wait(0.01):
        pass
'''


def test_a_test_that_hangs_without_cpu_is_stopped_at_its_wall_budget(tmp_path):
    from lch import forked, suites
    (tmp_path / "test_hang.py").write_text(HANGING_SUITE)
    budgets = {"test_hang.py::test_waits_for_a_poll_that_never_comes": 0.0}

    def run() -> dict:
        suites._TestClock.MARGIN_S = 0.2     # in the child only: a 0.2 s CPU budget, 2 s wall
        return suites.run_pytest(["-p", "no:xdist", "test_hang.py"], tmp_path, budgets)
    [hung] = forked.run_all([forked.Task("hang", run, timeout_s=300)], jobs=1,
                            workdir=tmp_path / "runs")
    assert hung.result["outcome"] == "timeout", hung.result
    assert "wall time" in hung.result["message"]
    # Not the child's 10 x 300 s; the margin is wide for a loaded machine (it once took 12 s).
    assert hung.seconds < 0.2 * forked.WALL_FACTOR + 60
