"""``lch.venvs.ensure`` builds a release's venv once, also when two runs ask at the same time.

Real threads: what is tested is two callers racing for one venv folder (CI's xdist workers
running two history tests do). The build itself is replaced by a slow fake, so no pip runs.
"""

from __future__ import annotations

import threading
import time

from lch import venvs


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
