"""``lch.venvs.ensure`` builds a release's venv once, also when two runs ask at the same time.

Real threads: what is tested is two callers racing for one venv folder (CI's xdist workers
running two history tests do). The build itself is replaced by a slow fake, so no pip runs.
"""

from __future__ import annotations

import threading
import time

import pytest

from lch import venvs
from sim.vllm.release import REQUIREMENTS_DIR


def test_two_callers_at_once_build_a_release_venv_once(tmp_path, monkeypatch):
    builds: list[str] = []

    def fake_venv(command, check):          # python -m venv DIR: make the folder, slowly
        builds.append(command[-1])
        time.sleep(0.3)                     # the window in which a second build would start

    monkeypatch.setattr(venvs.subprocess, "run", fake_venv)
    monkeypatch.setattr(venvs, "_pip", lambda python, *args: None)
    monkeypatch.setattr(venvs, "requirements_file", lambda release: tmp_path / "req.txt")
    (tmp_path / "venvs" / "vllm-0.26.0").mkdir(parents=True)   # the marker's folder
    got: list[venvs.Venv] = []
    callers = [threading.Thread(target=lambda: got.append(venvs.ensure("0.26.0",
                                                                        tmp_path / "venvs")))
               for _ in range(2)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert len(builds) == 1, builds
    assert sorted(v.cached for v in got) == [False, True]


def _pins(path, seen=()):
    """``(package, pin, file)`` for every line of a requirements file, following its ``-r``
    includes (pip's own parser is not a public API; the files use only names, ``==`` pins and
    ``-r``)."""
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            included = path.parent / line[3:].strip()
            assert included not in seen, f"{path.name} includes {included.name} twice"
            yield from _pins(included, (*seen, path))
        elif line:
            name, _, pin = line.partition("==")
            yield name.strip().lower().replace("_", "-"), pin.strip(), path.name


@pytest.mark.parametrize("family", sorted(p.name for p in REQUIREMENTS_DIR.glob("vllm-*.txt")))
def test_a_release_family_pins_each_package_once(family):
    # pip refuses a list that pins one package at two versions: the release's venv is then
    # never built and its history cells are all unavailable (0.10.2's were, when 0.33's lock
    # gained a compressed-tensors pin that 0.10's list, including it, pinned otherwise).
    pins: dict[str, tuple[str, str]] = {}
    for name, pin, where in _pins(REQUIREMENTS_DIR / family):
        assert pins.setdefault(name, (pin, where)) == (pin, where), (
            f"{family}: {name} pinned =={pins[name][0]} in {pins[name][1]} and =={pin} in "
            f"{where}; keep a pin that differs by family out of the files families share")


def test_a_failed_pip_install_is_told_by_its_errors_not_its_warnings(monkeypatch):
    said = ("WARNING: Location 'file:///x/' is ignored: it is neither a file nor a directory.\n"
            "ERROR: Cannot install a==1 and a==2 because these package versions conflict.\n"
            "ERROR: ResolutionImpossible\n"
            "WARNING: Location 'file:///y/' is ignored: it is neither a file nor a directory.")

    class Failed:
        returncode, stderr, stdout = 1, said, ""

    monkeypatch.setattr(venvs.subprocess, "run", lambda *args, **kwargs: Failed())
    with pytest.raises(venvs.HarnessError) as failed:
        venvs._pip("python", "a==1")
    assert "Cannot install a==1 and a==2" in str(failed.value)
    assert "WARNING" not in str(failed.value)
