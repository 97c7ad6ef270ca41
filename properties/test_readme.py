"""Every command in the README's ``bash`` blocks runs as written, on a fresh clone, with a small
budget, and exits as promised (0 only when everything it was asked to check was checked).

The clone is ``git clone`` of this checkout's HEAD. ``nox`` sessions run with ``--no-venv
--no-install`` in this interpreter (the test's own environment stands in for the session's
venv: creating venvs and installing torch is what CI's own ``nox`` call already does);
``nox -s tests`` is this very run and is not repeated. Budgets are cut (``--budget`` to a few
seconds, ``--examples`` to a few); the vLLM recipe runs against a checkout made of the
installed wheel's files, and only where vLLM is installed (``nox -s vllm``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HAS_VLLM = importlib.util.find_spec("vllm") is not None
pytestmark = pytest.mark.readme


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            command = line.split("  #")[0].strip()
            if command:
                commands.append(command)
    return commands


def expected_exit(command: str) -> int | None:
    """What the command must exit with here; None: it cannot run here (needs vLLM)."""
    if "native:enc-stale-freed" in command:
        return 1                                   # the planted bug is found
    if "vllm" not in command or HAS_VLLM:
        return 0
    if command.startswith("nox -s hunt") and "~/src/vllm" not in command:
        return 1              # refused before any work, with the reason (nox says 1 for any)
    return None


def shrink(argv: list[str]) -> list[str]:
    budget = "40s" if "vllm" in argv else "20s"   # vLLM's examples are slower
    if "hunt" in argv and "--help" not in argv and "--budget" not in argv \
            and "--examples" not in argv:
        argv = [*argv, "--budget", budget]         # the default budget is 60 s
    out, it = [], iter(argv)
    for arg in it:
        if arg == "--budget":
            out += [arg, budget]
            next(it)
        elif arg == "--examples":
            out += [arg, "5"]
            next(it)
        else:
            out.append(arg)
    return out


def as_run_here(command: str, checkout: Path | None) -> list[str]:
    command = command.replace("pip install nox && ", "")
    if checkout is not None:
        command = command.replace("~/src/vllm", str(checkout))
    argv = shlex.split(command)
    if argv[0] == "nox":
        argv = [*nox_command(), "--no-venv", "--no-install", *argv[1:]]
        if "--" not in argv:
            argv.append("--")
        if "vllm" in argv[argv.index("-s") + 1]:
            argv += ["-k", "stale_freed"]          # the suites, cut to one reproducer
    elif argv[0] == "python":
        argv[0] = sys.executable
    return shrink(argv)


def nox_command() -> list[str]:
    """nox, run by its own interpreter: not through a pyenv shim, which would put its Python
    (without torch) first on PATH for the session's ``python``."""
    nox = shutil.which("nox")
    if nox is None:
        pytest.skip("nox is not installed here")
    if "/shims/" in nox and shutil.which("pyenv"):
        nox = subprocess.run(["pyenv", "which", "nox"], capture_output=True,
                             text=True).stdout.strip() or nox
    first = Path(nox).read_bytes().split(b"\n", 1)[0].decode(errors="replace")
    if first.startswith("#!") and "python" in first:
        return [first[2:].split()[0], "-m", "nox"]
    return [nox]


def vllm_checkout(tmp_path: Path) -> Path:
    """A git checkout holding the installed vLLM's own Python files (two are enough for the
    overlay), with the README's branch."""
    wheel = Path(list(importlib.util.find_spec("vllm").submodule_search_locations)[0])
    tree = tmp_path / "vllm-src"
    (tree / "vllm" / "v1" / "core").mkdir(parents=True)
    shutil.copy(wheel / "__init__.py", tree / "vllm" / "__init__.py")
    shutil.copy(wheel / "v1" / "core" / "encoder_cache_manager.py",
                tree / "vllm" / "v1" / "core" / "encoder_cache_manager.py")
    git = ["git", "-C", str(tree), "-c", "user.email=lch@example.invalid", "-c", "user.name=lch"]
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "wheel files"], check=True)
    subprocess.run([*git, "branch", "my-pr-branch"], check=True)
    return tree


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("readme") / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(where)], check=True)
    return where


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_runs_as_written(command, clone, tmp_path):
    if command.startswith("pip install nox && nox -s tests") or command == "nox -s tests":
        pytest.skip("the test suite: this very run")
    code = expected_exit(command)
    if code is None:
        pytest.skip("needs vLLM (runs in nox -s vllm)")
    checkout = vllm_checkout(tmp_path) if "~/src/vllm" in command else None
    argv = as_run_here(command, checkout)
    if argv[0] == "git":
        argv = ["git", "-C", str(checkout), *argv[3:]]
    env = {**os.environ, "PYTHONPATH": str(clone), "VLLM_TARGET_DEVICE": "cpu",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "LCH_REPRODUCER_DIR": str(tmp_path / "found")}
    done = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == code, \
        f"{shlex.join(argv)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    if "vllm" in command and not HAS_VLLM:
        assert "vLLM is not installed" in done.stdout + done.stderr
