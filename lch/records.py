"""Result records: every campaign's figures as data a reader can check, and the README's
tables generated from them.

A *record* is one JSON file under ``results/<kind>/`` (``mutants``, ``history``, ``bench``,
``hunt``, ...), written by the campaign that measured it (``--record-dir``): what ran (the
command), on what (the harness commit, the vLLM under test, the machine: cores, load,
Python, torch), when, how long, and the outcome of every item (each mutant, each release
cell, each benchmark row), beside the summary figures a document cites. Records are small
(no logs, no traces) and committed; the logs stay where the campaign wrote them.

Documents cite records only through *generated blocks*::

    <!-- generated: mutation-scores -->
    ... (written by ``python -m lch.records render``) ...
    <!-- end generated -->

``render`` rewrites every such block in ``README.md`` and ``docs/*.md`` from the records
(``RENDERERS``: block name -> function of the records); ``render --check`` (a test runs it)
fails when a block is not what the committed records give, so a figure in a block always
has its record. No test finds a figure typed outside a block: keep every figure inside one.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from sim.files import atomic_write

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
SCHEMA = "lch-result/1"
DOCUMENTS = ("README.md", "docs")
BLOCK = re.compile(r"(<!-- generated: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)"
                   r"(<!-- end generated -->)", re.S)


# -- what a record says about where it was measured --------------------------------------------

def harness_commit(root: Path = ROOT) -> dict:
    """The harness's commit (``dirty`` with uncommitted changes to tracked files). Records
    under ``results/`` are not the harness: a run that supersedes a committed record (and a
    history run writes its record after every release, so that nothing is lost) is still
    measured on a clean tree."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                                  text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None
    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                ":(exclude)results")
    return {"commit": commit, "dirty": bool(dirty)}


def machine() -> dict:
    """Cores, load, Python, torch: what a wall time depends on."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    torch_version = None
    if "torch" in sys.modules:         # never imported for this: it takes seconds
        torch_version = sys.modules["torch"].__version__
    else:
        try:
            from importlib.metadata import version
            torch_version = version("torch")
        except Exception:  # noqa: BLE001 - no torch: the records say so
            torch_version = None
    return {"cores": os.cpu_count(), "load_avg": load, "python": platform.python_version(),
            "torch": torch_version, "platform": platform.platform(terse=True),
            "processor": platform.machine()}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def envelope(kind: str, name: str, command: str, *, vllm: dict | None, wall_s: float,
             summary: dict, items: list[dict], started: str | None = None) -> dict:
    """A record: ``summary`` holds the figures documents cite, ``items`` every outcome."""
    return {"schema": SCHEMA, "kind": kind, "name": name, "started": started or now(),
            "finished": now(), "harness": harness_commit(), "vllm": vllm,
            "machine": machine(), "command": command, "wall_s": round(wall_s, 1),
            "summary": summary, "items": items}


def write(record: dict, directory: str | os.PathLike) -> Path:
    """``directory/<kind>/<name>.json``, atomically; a record of the same name is replaced
    (a re-run supersedes it; git keeps the old one)."""
    folder = Path(directory) / record["kind"]
    folder.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", record["name"])
    return atomic_write(folder / f"{safe}.json", json.dumps(record, indent=1) + "\n")


def load(kind: str, results: Path = RESULTS) -> list[dict]:
    """Every committed record of ``kind``, by name."""
    folder = results / kind
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    bad = [r.get("name") for r in records if r.get("schema") != SCHEMA]
    if bad:
        raise ValueError(f"results/{kind}: records {bad} are not {SCHEMA}; re-run them")
    return records


# -- generated blocks --------------------------------------------------------------------------

RENDERERS: dict[str, Callable[[Path], str]] = {}


def renderer(name: str):
    """Register ``function(results_dir) -> markdown`` as generated block ``name``."""
    def register(function):
        RENDERERS[name] = function
        return function
    return register


def _load_renderers() -> dict[str, Callable[[Path], str]]:
    """The registry, every campaign's blocks registered in it. Read through the imported
    ``lch.records``: under ``python -m lch.records`` this file runs as ``__main__``, a module
    of its own, whose ``RENDERERS`` the campaign modules never see."""
    # Each campaign module registers its own blocks; importing them is cheap (no vLLM).
    import lch.record_blocks  # noqa: F401
    import lch.records
    return lch.records.RENDERERS


def documents(root: Path = ROOT) -> list[Path]:
    paths = [root / "README.md"] + sorted((root / "docs").glob("**/*.md"))
    return [p for p in paths if p.is_file()]


def rendered(text: str, results: Path) -> str:
    """``text`` with every generated block rewritten from ``results``."""
    renderers = _load_renderers()

    def block(match: re.Match) -> str:
        name = match.group("name")
        if name not in renderers:
            raise ValueError(f"generated block {name!r} has no renderer; known: "
                             f"{', '.join(sorted(renderers))}")
        body = renderers[name](results).rstrip("\n") + "\n"
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(block, text)


def render(check: bool = False, root: Path = ROOT, results: Path | None = None) -> list[Path]:
    """Rewrite the blocks of every document; with ``check``, change nothing and return the
    documents whose blocks differ from what the records give."""
    results = results or root / "results"
    stale = []
    for path in documents(root):
        text = path.read_text()
        new = rendered(text, results)
        if new != text:
            stale.append(path)
            if not check:
                atomic_write(path, new)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lch.records", description=__doc__
                                     .splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    cmd = sub.add_parser("render", help="rewrite the generated blocks of README.md and docs/")
    cmd.add_argument("--check", action="store_true",
                     help="change nothing; exit 1 naming the documents that are stale")
    args = parser.parse_args(argv)
    stale = render(check=args.check)
    for path in stale:
        verb = "is stale" if args.check else "rewritten"
        print(f"{path.relative_to(ROOT)} {verb}"
              + ("; run `python -m lch.records render`" if args.check else ""))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    # Run as ``python -m lch.records`` this file is ``__main__``, while the renderers register
    # with ``lch.records`` (``lch/record_blocks.py`` imports it by name): use that module.
    from lch import records
    sys.exit(records.main())
