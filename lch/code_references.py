"""Every repository path the project's own text cites resolves, and nothing cites the
developer-only notes that live outside the repository.

Read: the comments and string literals (docstrings included) of every tracked ``.py`` file,
the whole text of every tracked ``.sh`` file, and the pages under ``docs/specs/`` (their
backticked paths and relative links). A citation is

- a repo-relative path starting at a top-level folder of the project
  (``sim/vllm/prefix_cache_compat.py``, ``properties/``, ``docs/specs/scheduler-pass.md``): it
  must exist; a ``*`` in it is a glob that must match something; one with a placeholder
  (``<kind>``, ``{name}``) is not checked;
- a dotted name in double backticks (``sim.outcomes.outside_label``): its longest module
  prefix must exist and define the next name;
- ``path.py:Name`` or ``package.module:Name`` (``properties.harness:HarnessMachine``): the
  module must exist and define ``Name`` (a ``def``, ``class`` or assignment at any depth);
- in a page under ``docs/specs/``, a relative link ``(../findings/mamba-mtp.md)``.

Banned everywhere it reads: ``specs/`` outside ``docs/specs/``, ``DESIGN.md``, ``STYLE.md`` and
``../shared``: those name notes for the project's developers that users do not have.

Why not a link checker from a registry: the citations are in Python comments and docstrings,
in the project's own spellings (dotted modules, ``path:Name``), which Markdown link checkers
do not read; ``tokenize`` and a few patterns do.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterable, Iterator
from pathlib import Path

from attrs import frozen

ROOT = Path(__file__).resolve().parent.parent
TOP = ("sim", "properties", "fixtures", "results", "lch", "models", "docs", "tools")
PACKAGES = ("sim", "properties", "fixtures", "lch", "models")
PLACEHOLDER = re.compile(r"[<>{}]")
# Not preceded by a path or name character: ``vllm/model_executor/models/x.py`` is vLLM's.
_START = r"(?<![\w./-])"
PATH = re.compile(_START + r"((?:{})/[\w./*<>{{}}-]*|noxfile\.py|conftest\.py|pyproject\.toml)"
                  .format("|".join(TOP)))
NAMED = re.compile(_START + r"((?:{})[\w./]*?)(?:\.py)?:([A-Za-z_]\w*)".format("|".join(PACKAGES)))
# A dotted name in double backticks (``sim.outcomes.outside_label``): the longest module
# prefix must exist, and the name after it be defined there.
DOTTED = re.compile(r"``((?:{})(?:\.\w+)+)(?:\(\))?``".format("|".join(PACKAGES)))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
BANNED = (
    (re.compile(r"(?<!docs/)(?<![\w-])specs/"), "specs/ (cite docs/specs/<page>.md)"),
    (re.compile(r"\bDESIGN\.md"), "DESIGN.md (cite docs/design.md)"),
    (re.compile(r"\bSTYLE\.md"), "STYLE.md (say the rule where it applies)"),
    (re.compile(r"\.\./shared|/work/shared"), "../shared (notes outside the repository)"),
    # The notes by file name alone (a Markdown link's text or target in docs/specs/ aside).
    (re.compile(r"(?<![\w/-])(?<!\]\()(?<!\[)(?:vllm-drive|vllm-releases|encoder-cache|offload-engine"
                r"|tiered-lookup)\.md"), "a developer note by name (cite docs/specs/<page>.md)"),
)
# These two spell the banned names in order to ban them: exempt from the ban, not from the
# path checks.
BAN_EXEMPT = frozenset({"lch/code_references.py", "lch/test_code_references.py"})


@frozen
class Problem:
    file: str
    line: int
    cited: str
    why: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.cited!r}: {self.why}"


def tracked(*patterns: str, root: Path = ROOT) -> list[Path]:
    """The tracked files matching ``patterns`` (git pathspecs), as paths under ``root``."""
    out = subprocess.run(["git", "ls-files", "--", *patterns], cwd=root, check=True,
                         capture_output=True, text=True).stdout
    return [root / name for name in out.splitlines()]


def _docstring_starts(source: str) -> set[tuple[int, int]]:
    """Where each docstring (module, class, function) begins: (line, column)."""
    starts = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                starts.add((first.lineno, first.col_offset))
    return starts


def python_text(source: str) -> Iterator[tuple[int, str, bool]]:
    """(line, text, cites) of every comment and string literal of a Python source; ``cites``
    for comments and docstrings, whose paths must resolve (other strings are data: a test's
    made-up path, an output file's name)."""
    docstrings = _docstring_starts(source)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.STRING):
            cites = tok.type == tokenize.COMMENT or tok.start in docstrings
            for offset, text in enumerate(tok.string.splitlines()):
                yield tok.start[0] + offset, text, cites


def plain_text(source: str) -> Iterator[tuple[int, str, bool]]:
    for number, text in enumerate(source.splitlines(), start=1):
        yield number, text, True


def _ignored(cited: str, root: Path) -> bool:
    """Whether git ignores ``cited`` (up to its first glob part): an output location the
    harness creates when it runs (``fixtures/reproducers/found``), not a file to commit."""
    parts = Path(cited).parts
    stem = "/".join(parts[:next((i for i, p in enumerate(parts) if "*" in p), len(parts))])
    for candidate in (stem, stem + "/"):
        if stem and subprocess.run(["git", "check-ignore", "-q", "--no-index", candidate],
                                   cwd=root).returncode == 0:
            return True
    return False


def _defines(module: Path, name: str) -> bool:
    text = module.read_text()
    return re.search(rf"^\s*(?:def|class|async def)\s+{name}\b|^\s*{name}\s*[:=]"
                     rf"|\bimport\b.*\b{name}\b", text, re.M) is not None


def _module_file(dotted: str, root: Path) -> Path | None:
    base = root / dotted.replace(".", "/")
    for candidate in (base.with_suffix(".py") if base.suffix != ".py" else base,
                      base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def check_path(cited: str, root: Path) -> str | None:
    """Why ``cited`` does not resolve under ``root`` (None: it does, or is not checkable)."""
    cited = cited.rstrip(".,;:")
    if PLACEHOLDER.search(cited):
        return None
    if any(root.glob(cited)) if "*" in cited else (root / cited).exists():
        return None
    if _ignored(cited, root):
        return None
    return "no file matches this pattern" if "*" in cited else "no such file or folder"


def check_named(module: str, name: str, root: Path) -> str | None:
    path = _module_file(module.removesuffix(".py").replace("/", "."), root)
    if path is None:
        return f"no module {module}"
    return None if _defines(path, name) else f"{path.relative_to(root)} defines no {name}"


def check_dotted(dotted: str, root: Path) -> str | None:
    parts = dotted.split(".")
    found = next((i for i in range(len(parts), 0, -1)
                  if _module_file(".".join(parts[:i]), root) is not None), 0)
    if not found:
        return f"no module {parts[0]}.{parts[1]}"
    if found == len(parts):
        return None
    module = _module_file(".".join(parts[:found]), root)
    return None if _defines(module, parts[found]) else \
        f"{module.relative_to(root)} defines no {parts[found]}"


def check_lines(file: str, lines: Iterable[tuple[int, str, bool]], root: Path = ROOT,
                links_from: Path | None = None) -> list[Problem]:
    """The problems of ``lines`` (line, text, whether its paths must resolve) of ``file``;
    ``links_from`` (a folder) also checks Markdown links relative to it."""
    problems = []
    for number, text, cites in lines:
        for pattern, why in BANNED if file not in BAN_EXEMPT else ():
            for hit in pattern.finditer(text):
                problems.append(Problem(file, number, hit.group(0), f"cites {why}"))
        if not cites:
            continue
        named_spans = []
        for hit in NAMED.finditer(text):
            named_spans.append(hit.span())
            why = check_named(hit.group(1), hit.group(2), root)
            if why:
                problems.append(Problem(file, number, hit.group(0), why))
        for hit in DOTTED.finditer(text):
            why = check_dotted(hit.group(1), root)
            if why:
                problems.append(Problem(file, number, hit.group(1), why))
        for hit in PATH.finditer(text):
            if any(a <= hit.start() < b for a, b in named_spans):
                continue
            why = check_path(hit.group(1), root)
            if why:
                problems.append(Problem(file, number, hit.group(1), why))
        for hit in LINK.finditer(text) if links_from is not None else ():
            target = hit.group(1)
            if "://" in target or target.startswith("mailto:"):
                continue
            resolved = (links_from / target).resolve()
            if not resolved.exists():
                problems.append(Problem(file, number, target, "link to no such file"))
    return problems


def problems(root: Path = ROOT) -> list[Problem]:
    """Every unresolved or banned citation in the project's tracked text."""
    found = []
    for path in tracked("*.py", root=root):
        rel = str(path.relative_to(root))
        found += check_lines(rel, python_text(path.read_text()), root)
    for path in tracked("*.sh", root=root):
        found += check_lines(str(path.relative_to(root)), plain_text(path.read_text()), root)
    for path in tracked("docs/specs/*.md", root=root):
        found += check_lines(str(path.relative_to(root)), plain_text(path.read_text()), root,
                             links_from=path.parent)
    return found


if __name__ == "__main__":
    for problem in problems():
        print(problem)
