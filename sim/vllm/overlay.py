"""Your own vLLM under test: a checkout's Python files over the installed release's wheel.

A vLLM checkout has the Python sources but not the compiled parts (``_C.abi3.so``, the
generated ``_version.py``); the wheel of the matching release has both. ``build(checkout)``
makes a directory ``vllm/`` of symlinks: every file of the installed wheel's package, then
every ``*.py`` of the checkout's package over it (nothing compiled, nothing copied).
``activate`` puts it first on ``sys.path`` and ``PYTHONPATH`` (subprocesses see it too);
``python -m sim.vllm.overlay PATH`` builds it and prints its root (``nox -s vllm
-- --vllm-path PATH`` uses that). ``describe`` says which vLLM is under test: version, path
and git commit, for every report. ``log_to_file`` sends vLLM's logging to a file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sim.errors import HarnessError, TargetUnavailable


def checkout_package(path: str | os.PathLike) -> Path:
    checkout = Path(path).expanduser().resolve()
    if not (checkout / "vllm" / "__init__.py").is_file():
        raise HarnessError(f"--vllm-path {path}: no vllm/__init__.py there; give the root "
                           "of a vLLM checkout (the directory holding vllm/ and setup.py)")
    return checkout / "vllm"


def installed_package() -> Path:
    """The installed wheel's ``vllm`` package directory, found without importing it."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        from sim.vllm.release import install_hint
        raise TargetUnavailable("--vllm-path needs the matching vLLM release installed for "
                                f"its compiled parts; vLLM is not installed: {install_hint()}")
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def build(path: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """The overlay for checkout ``path``: returns the directory to put first on sys.path."""
    source = checkout_package(path)
    wheel = installed_package()
    if root is None:
        # A fresh folder per build: a hunt's workers each build one while their siblings
        # import vLLM, and rebuilding a shared folder under them loses modules mid-import.
        digest = hashlib.sha256(str(source).encode()).hexdigest()[:12]
        root = Path(tempfile.mkdtemp(prefix=f"lch-vllm-overlay-{digest}-"))
    root = Path(root)
    shutil.rmtree(root, ignore_errors=True)
    _link_tree(wheel, root / "vllm", lambda name: not name.endswith(".pyc"))
    _link_tree(source, root / "vllm", lambda name: name.endswith(".py"))
    (root / "LCH_CHECKOUT").write_text(str(source.parent) + "\n")
    (root / "LCH_WHEEL").write_text(str(wheel) + "\n")
    return root


def release_package() -> Path | None:
    """The installed release's ``vllm`` package under an active overlay (what the checkout's
    files are laid over; ``sim/outcomes.py`` diffs against it), else None."""
    for entry in sys.path:
        marker = Path(entry or ".") / "LCH_WHEEL"
        if marker.is_file():
            return Path(marker.read_text().strip())
    return None


def _link_tree(source: Path, dest: Path, wanted) -> None:
    for folder, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        target = dest / Path(folder).relative_to(source)
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            if wanted(name):
                link = target / name
                if link.is_symlink() or link.exists():
                    link.unlink()
                link.symlink_to(Path(folder) / name)


def activate(path: str | os.PathLike) -> Path:
    """Build the overlay for checkout ``path`` and put it first, before vLLM is imported."""
    if "vllm" in sys.modules:
        raise HarnessError("--vllm-path must take effect before vLLM is imported")
    root = build(path)
    sys.path.insert(0, str(root))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(root), *filter(None, [os.environ.get("PYTHONPATH")])])
    os.environ["LCH_VLLM_PATH"] = str(checkout_package(path).parent)
    importlib.invalidate_caches()
    return root


def git_commit(path: str | os.PathLike) -> str | None:
    """``HEAD`` of the git checkout holding ``path`` (``-dirty`` with local changes)."""
    try:
        head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=30)
        if head.returncode:
            return None
        dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("-dirty" if dirty else "")


def describe() -> dict:
    """The vLLM under test (after it is imported): version, path, commit, and the checkout
    an overlay came from (``LCH_VLLM_PATH``); ``git`` is False for a checkout outside git."""
    import vllm

    from sim.vllm.release import release_or_unknown
    checkout = os.environ.get("LCH_VLLM_PATH")
    package = Path(vllm.__file__).parent
    if checkout:
        # A checkout's commit is its own; one outside git has none (the wheel's release
        # commit names other code, so it is never given for it).
        commit = git_commit(checkout)
        return {"version": release_or_unknown(), "path": checkout, "checkout": checkout,
                "commit": commit, "git": commit is not None}
    version_module = sys.modules.get("vllm._version")
    commit = getattr(version_module, "__commit_id__", None) if version_module else None
    return {"version": release_or_unknown(), "path": str(package), "checkout": None,
            "commit": commit, "git": None}


def log_to_file(path: str | os.PathLike) -> None:
    """vLLM's logging into ``path`` (appended), not the terminal: set before vLLM is
    imported, so vLLM configures no handler of its own."""
    os.environ["VLLM_CONFIGURE_LOGGING"] = "0"
    logger = logging.getLogger("vllm")
    logger.handlers = [h for h in logger.handlers if not getattr(h, "lch", False)]
    handler = logging.FileHandler(path, delay=True)
    handler.lch = True
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def main(argv: list[str]) -> int:
    """``python -m sim.vllm.overlay PATH``: build the overlay, print its root."""
    if len(argv) != 1:
        print("usage: python -m sim.vllm.overlay VLLM_CHECKOUT", file=sys.stderr)
        return 2
    try:
        print(build(argv[0]))
    except HarnessError as error:
        print(f"llm-cache-harness: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def commit_text(info: dict) -> str:
    """How a report names the commit of ``describe()``'s vLLM."""
    if info.get("commit"):
        return f"commit {info['commit']}"
    return "not a git checkout: no commit" if info.get("git") is False else "commit unknown"
