"""The README and ``docs/`` stay honest: no internal issue number, commit hash or one machine's
path; every link and backticked repository path resolves; every command runs as written.

Commands are the lines of ``bash`` / ``sh`` fences and the inline spans that start with
``nox``, ``python -m``, ``pytest`` or ``pip``. Each is planned by ``plan`` (a command no plan
knows fails the test: add it there, or mark it in the text). Runs happen in a fresh clone of
this checkout's HEAD, budgets cut (``--budget``, ``--examples``, ``-k`` on the vLLM suites,
``--list`` for a mutation campaign, ``-k`` and a 10 s hunt for history). nox sessions run with
``--no-venv --no-install`` in an interpreter that has what the session would install (the
test's own, or for vLLM a venv ``nox --install-only -s vllm`` builds); history runs through
real nox (its own small venv and the release venvs of ``LCH_VENV_DIR``). A session CI runs
whole (``.ci/run``) named bare, or with only what ``.ci/run`` exports, is checked to be run
there. A command marked ``# needs a GPU`` is checked for form only: the mark, the session,
the options.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from attrs import frozen

ROOT = Path(__file__).resolve().parents[1]
HAS_VLLM = importlib.util.find_spec("vllm") is not None
GPU_MARK = "needs a GPU"
MAX_README_LINES = 300


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


def linted() -> list[Path]:
    """The documents and the CI recipe users copy (``docs/ci/``)."""
    return [*documents(), *sorted(p for p in (ROOT / "docs" / "ci").glob("*") if p.is_file())]


def doc_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


# -- (a) lint: what a user's document must not carry --------------------------------------------

INTERNAL_ISSUE = re.compile(r"\bissues? \d{1,3}\b", re.I)       # vLLM's are "#NNNNN"
MACHINE_PATH = re.compile(r"(?<![\w.~$-])/(?:work|opt|tmp|root|home)(?:/|\b)")
HEX_WORD = re.compile(r"\b[0-9a-f]{7,40}\b")
HEX_SPAN = re.compile(r"`([0-9a-f]{7,40})`")


@cache
def repo_commits() -> tuple[str, ...]:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-list", "--all"], capture_output=True,
                          text=True, check=True)
    return tuple(done.stdout.split())


def looks_like_commit(word: str) -> bool:
    return bool(re.search(r"[a-f]", word)) and bool(re.search(r"\d", word))


def lint(text: str, commits: tuple[str, ...]) -> list[str]:
    """Each problem as ``line N: what``."""
    problems = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in INTERNAL_ISSUE.finditer(line):
            problems.append(f"line {n}: internal issue number {m.group()!r} (say what it is)")
        for m in MACHINE_PATH.finditer(line):
            problems.append(f"line {n}: a path of one machine ({m.group()!r}...)")
        for m in HEX_SPAN.finditer(line):
            if looks_like_commit(m.group(1)):
                problems.append(f"line {n}: a commit-like hash `{m.group(1)}`")
        for m in HEX_WORD.finditer(line):
            if any(c.startswith(m.group()) for c in commits):
                problems.append(f"line {n}: {m.group()} is a commit of this repository")
    return sorted(set(problems))


@pytest.mark.parametrize("path", linted(), ids=doc_id)
def test_a_document_carries_no_internal_issue_hash_or_machine_path(path):
    problems = lint(path.read_text(), repo_commits())
    assert not problems, f"{doc_id(path)}:\n" + "\n".join(problems)


def test_the_readme_is_short():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines: move detail to docs/"


def test_each_lint_check_can_fail():
    commit = repo_commits()[0]
    bad = {"internal issue": "fixed at issue 9's second round",
           "machine": "run /work/venv/bin/python, or /tmp/x",
           "commit-like": "measured at `1b8baad`",
           "is a commit": f"as of {commit[:9]} the table"}
    for what, text in bad.items():
        assert any(what in p for p in lint(text, repo_commits())), (what, text)
    fine = "vLLM issue #38551, PR #51228; `results/history/0.30.0.json`; 0.33.0; 1234567 rows"
    assert lint(fine, repo_commits()) == []


# -- (b) every link and repository path resolves ----------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SPAN = re.compile(r"`([^`\n]+)`")
TOP = ("models/", "sim/", "properties/", "fixtures/", "lch/", "docs/", "tools/", "results/",
       ".ci/", "noxfile.py", "pyproject.toml", "conftest.py", "README.md")
OUTPUTS = ("fixtures/reproducers/found",)        # written by a hunt (.gitignore)


def fences_removed(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def broken_references(path: Path, root: Path = ROOT) -> list[str]:
    text = fences_removed(path.read_text())
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        where = (path.parent / target.split("#")[0]).resolve()
        if not where.exists():
            broken.append(f"link ({target})")
    for span in SPAN.findall(text):
        ref = span.split("::")[0].rstrip(".,")
        if " " in ref or not ref.startswith(TOP) or ref.startswith(OUTPUTS):
            continue
        pattern = re.sub(r"<[^>]+>", "*", ref).rstrip("/")
        if "<" in ref:       # a template (an output not written yet): its folder must exist
            pattern = pattern[:pattern.index("*")].rpartition("/")[0] or "."
        if not (root / pattern).exists() and not list(root.glob(pattern)):
            broken.append(f"path `{span}`")
    return broken


@pytest.mark.parametrize("path", documents(), ids=doc_id)
def test_every_link_and_path_resolves(path):
    broken = broken_references(path)
    assert not broken, f"{doc_id(path)}: {broken}"


def test_a_broken_link_or_path_is_caught(tmp_path):
    (tmp_path / "docs").mkdir()
    doc = tmp_path / "docs" / "x.md"
    doc.write_text("[ok](x.md), [gone](nope.md), `lch/nowhere.py`, `models/<s>_gone.py`, "
                   "`lch/cli.py::test_x`, `lch/<kind>.json`, `gone/<x>/y.py`\n")
    (tmp_path / "lch").mkdir()
    (tmp_path / "lch" / "cli.py").write_text("")
    # models/<s>_gone.py: a template whose folder is not there
    assert broken_references(doc, tmp_path) == ["link (nope.md)", "path `lch/nowhere.py`",
                                                 "path `models/<s>_gone.py`"]


# -- (c) every command runs, or is marked ------------------------------------------------------

COMMAND = re.compile(r"^(?:(?:nox|pytest|pip)(?:\s|$)|python -m\s)")
FENCE = re.compile(r"^```(bash|sh)\n(.*?)^```", re.S | re.M)


@frozen
class Command:
    doc: str
    text: str          # as written, without its trailing comment
    comment: str = ""


def commands_in(text: str, doc: str) -> list[Command]:
    found = []
    for _, block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            command, _, comment = line.partition("  #")
            if command.strip() and not command.strip().startswith("#"):
                found.append(Command(doc, command.strip(), comment.strip()))
    for span in SPAN.findall(fences_removed(text)):
        if COMMAND.match(span):
            found.append(Command(doc, span))
    return list(dict.fromkeys(found))


def all_commands() -> list[Command]:
    """Each command once, under the first document that has it (a span repeating a block's
    command, or another page's, runs once)."""
    found: dict[tuple[str, str], Command] = {}
    for path in documents():
        for c in commands_in(path.read_text(), doc_id(path)):
            found.setdefault((c.text, c.comment), c)
    return list(found.values())


@cache
def ci_sessions() -> tuple[str, ...]:
    line = next(ln for ln in (ROOT / ".ci" / "run").read_text().splitlines()
                if ln.startswith("nox -s "))
    return tuple(line.split()[2:])


@cache
def ci_env() -> dict[str, str]:
    """What ``.ci/run`` exports for its nox call."""
    text = (ROOT / ".ci" / "run").read_text()
    return dict(re.findall(r"^export ([A-Z_]+)=(\S+)$", text, flags=re.M))


@cache
def nox_sessions() -> tuple[str, ...]:
    return tuple(re.findall(r"^@nox\.session.*\ndef (\w+)\(", (ROOT / "noxfile.py").read_text(),
                            flags=re.M))


@frozen
class Plan:
    how: str                   # fast | slow | ci | gpu | form
    exit: int = 0
    vllm: bool = False         # runs in an interpreter with vLLM
    extra: tuple[str, ...] = ()  # appended (after the session's ``--`` for nox)
    real_nox: bool = False     # through nox's own venvs (reused: -R), not --no-venv
    env: tuple[tuple[str, str], ...] = ()   # set for the run
    expect: tuple[str, ...] = ()  # in its output (CHECKOUT: the checkout's path)
    forbid: tuple[str, ...] = ()  # not in its output


def plan(c: Command) -> Plan:
    """How the test runs ``c``; an unknown command is an error naming what to do."""
    argv, env = shlex.split(c.text), {}
    while argv and re.match(r"^[A-Z_]+=", argv[0]):
        name, _, value = argv.pop(0).partition("=")
        env[name] = value
    words = " ".join(argv)
    if GPU_MARK in c.comment:
        return Plan("gpu")
    if re.fullmatch(r"nox -s (\w+)", words) and argv[2] in ci_sessions() \
            and env.items() <= ci_env().items():
        return Plan("ci")      # as CI runs it, with what CI exports
    if words in ("nox -l", "pip install nox", "python -m lch.records render",
                 "python -m lch.cli hunt --help"):
        return Plan("fast")
    if words.startswith(("nox -s hunt", "python -m lch.cli hunt")):
        if "vllm" in argv:
            # every subsystem in a small budget leaves some pairs without an example (exit 3);
            # the report names the checkout it hunted
            return Plan("slow", vllm=True, extra=("--subsystem", "encoder_cache",
                                                  "--subsystem", "encoder_decoder_cache"),
                        expect=("CHECKOUT",))
        return Plan("fast", exit=1 if "native:" in words else 0)
    if words.startswith("nox -s vllm"):
        # The session as written (options, overlay, release check, every suite collected),
        # running one curated reproducer, serially: the whole set takes about 7 minutes on two
        # cores, more than this test's share of CI's 90. The header shows the overlay took.
        return Plan("slow", vllm=True, extra=("-k", "vllm_stale_freed"),
                    env=(("LCH_WORKERS", "0"),),
                    expect=("vLLM under test: ", "CHECKOUT", " passed"))
    if words.startswith("nox -s history"):
        # Both releases (0.26.0 diverges: exit 1), the encoder cache's suite alone, and its
        # cell hunted briefly (the other columns have no test selected: absent, not hunted).
        return Plan("slow", exit=1, real_nox=True, extra=(
            "--hunt-budget", "10s", "--", "-k", "test_encoder_cache_machine and not decoder"),
            expect=("hunts: 10s per cell",), forbid=("hunt exited",))
    if words.startswith("nox -s mutants"):
        return Plan("slow", vllm=True, extra=("--list",))
    if words.startswith(("python -m lch.mamba_mtp", "pytest fixtures/reproducers/")):
        return Plan("slow", vllm=True)
    if words == "python -m lch.measure hazards":
        # every searched machine, one seed of 5 examples; the record goes to the clone's results/
        return Plan("slow", extra=("--seeds", "0", "--examples", "5"))
    if words.startswith("python -m properties.witnesses.find"):
        return Plan("form")        # a template: its module and its --help run
    raise AssertionError(f"{c.doc}: no plan for `{c.text}`: add one to lch/test_docs.py plan(),"
                         f" or mark it `  # {GPU_MARK}` if it needs one")


COMMANDS = all_commands()


def by_plan(*hows: str) -> list:
    return [pytest.param(c, id=f"{c.doc}: {c.text}") for c in COMMANDS if plan(c).how in hows]


def test_every_command_has_a_plan():
    assert COMMANDS, "no command found in the documents"
    for c in COMMANDS:
        plan(c)
    with pytest.raises(AssertionError, match="no plan"):
        plan(Command("x.md", "nox -s bench"))


def test_commands_are_found_in_fences_and_spans():
    text = ("```bash\nnox -s hunt   # search\n# a comment\nLCH_X=1 nox -s tests  # needs a GPU\n"
            "```\n```python\npytest x.py\n```\nrun `pytest a.py` or `noxfile.py`, `python -m x`\n")
    assert [c.text for c in commands_in(text, "d")] == [
        "nox -s hunt", "LCH_X=1 nox -s tests", "pytest a.py", "python -m x"]


# substitutions for the placeholders the documents use
TEMPLATES = {"MODULE:CLASS": "vllm.v1.core.encoder_cache_manager:EncoderCacheManager"}


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


def vllm_checkout(tmp_path: Path, python: str) -> Path:
    """A git checkout holding two of the installed vLLM's own Python files (enough for the
    overlay, ``sim/vllm/overlay.py``)."""
    where = subprocess.run([python, "-c", "import importlib.util as u; print(list(u.find_spec("
                            "'vllm').submodule_search_locations)[0])"], capture_output=True,
                           text=True, check=True).stdout.strip()
    wheel, tree = Path(where), tmp_path / "vllm-src"
    (tree / "vllm" / "v1" / "core").mkdir(parents=True)
    shutil.copy(wheel / "__init__.py", tree / "vllm" / "__init__.py")
    shutil.copy(wheel / "v1" / "core" / "encoder_cache_manager.py",
                tree / "vllm" / "v1" / "core" / "encoder_cache_manager.py")
    git = ["git", "-C", str(tree), "-c", "user.email=lch@example.invalid", "-c", "user.name=lch"]
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "wheel files"], check=True)
    return tree


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("docs") / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(where)], check=True)
    return where


@pytest.fixture(scope="module")
def vllm_python() -> str:
    """An interpreter that imports vLLM: this one, or the ``vllm`` session's venv."""
    if HAS_VLLM:
        return sys.executable
    # One build at a time: each xdist worker runs this fixture, and a worker that found the
    # venv half built by another (nox creates it before it installs vLLM) had no vLLM in it.
    # fcntl's lock, not a library's: the one file lock every POSIX CI machine has.
    (ROOT / ".nox").mkdir(exist_ok=True)
    with open(ROOT / ".nox" / "vllm-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run([*nox_command(), "-R", "--install-only", "-s", "vllm"],
                              cwd=ROOT, capture_output=True, text=True, timeout=1800)
        fcntl.flock(lock, fcntl.LOCK_UN)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return str(ROOT / ".nox" / "vllm" / "bin" / "python")


def shrink(argv: list[str], vllm: bool) -> list[str]:
    """Budgets cut: ``--budget`` to seconds (vLLM's examples are slower), ``--examples`` to 5;
    a hunt without either gets the small budget (its default is 60 s)."""
    budget = "40s" if vllm else "20s"
    if "hunt" in argv and "--help" not in argv and "--budget" not in argv \
            and "--examples" not in argv:
        argv = [*argv, "--budget", budget]
    out, it = [], iter(argv)
    for arg in it:
        if arg in ("--budget", "--examples"):
            out += [arg, budget if arg == "--budget" else "5"]
            next(it)
        else:
            out.append(arg)
    return out


def as_run_here(c: Command, p: Plan, checkout: Path | None, python: str) -> list[str]:
    text = c.text
    for placeholder, value in TEMPLATES.items():
        text = text.replace(placeholder, value)
    if checkout is not None:
        text = text.replace("CHECKOUT", str(checkout))
    argv = shlex.split(text)
    if argv[0] == "nox":
        options = ["-R", "--envdir", str(ROOT / ".nox")] if p.real_nox \
            else ["--no-venv", "--no-install"]
        argv = [*nox_command(), *options, *argv[1:]]
        if "-s" in argv and "--" not in argv:
            argv.append("--")
    elif argv[0] in ("python", "pytest", "pip"):
        argv = [python, *(["-m", argv[0]] if argv[0] != "python" else []), *argv[1:]]
    return shrink([*argv, *p.extra], p.vllm)


def run(c: Command, clone: Path, tmp_path: Path, python: str) -> None:
    p = plan(c)
    checkout = vllm_checkout(tmp_path, python) if "CHECKOUT" in c.text else None
    argv = as_run_here(c, p, checkout, python)
    if "lch.mamba_mtp" in argv:                 # its record goes to the test's folder
        argv[argv.index("--record-dir") + 1] = str(tmp_path / "results")
    env = {**os.environ, "PYTHONPATH": str(clone), "VLLM_TARGET_DEVICE": "cpu",
           "PATH": f"{Path(python).parent}{os.pathsep}{os.environ['PATH']}",
           "LCH_REPRODUCER_DIR": str(tmp_path / "found"), "HYPOTHESIS_PROFILE": "ci"}
    if p.real_nox:     # the session's own venv, reused from this checkout's .nox
        env.pop("PYTHONPATH")
        env["LCH_VENV_DIR"] = os.environ.get("LCH_VENV_DIR") or str(ROOT / ".nox" / "bisect")
    env.update(p.env)
    done = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True,
                          timeout=1500)
    said = f"{shlex.join(argv)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == p.exit, said
    wrong = output_problems(p, done.stdout + done.stderr, checkout)
    assert not wrong, f"{wrong} in the output of {said}"


def output_problems(p: Plan, output: str, checkout: Path | None) -> list[str]:
    """What ``p`` expects missing from ``output``, and what it forbids present."""
    wanted = [t.replace("CHECKOUT", str(checkout)) for t in p.expect]
    return [f"missing {t!r}" for t in wanted if t not in output] + \
        [f"present {t!r}" for t in p.forbid if t in output]


def test_an_output_check_can_fail():
    p = Plan("slow", expect=("at CHECKOUT",), forbid=("hunt exited",))
    assert output_problems(p, "vLLM under test: 0.33.0 at /c (x)", Path("/c")) == []
    assert output_problems(p, "vLLM under test: 0.33.0 at /site (x)", Path("/c")) == [
        "missing 'at /c'"]
    assert output_problems(p, "at /c; hunt exited 2", Path("/c")) == ["present 'hunt exited'"]


@pytest.mark.slow      # each a subprocess, most a short hunt: the slow tier (fixtures/tiers.py)
@pytest.mark.parametrize("command", by_plan("fast"))
def test_a_documented_command_runs_as_written(command, clone, tmp_path):
    if command.text == "pip install nox" and importlib.util.find_spec("nox") is None:
        pytest.skip("nox is not installed in this interpreter: pip would download it")
    run(command, clone, tmp_path, sys.executable)


@pytest.mark.slow
@pytest.mark.parametrize("command", by_plan("slow"))
def test_a_documented_heavy_command_runs_as_written(command, clone, tmp_path, request):
    python = request.getfixturevalue("vllm_python") if plan(command).vllm else sys.executable
    run(command, clone, tmp_path, python)


@pytest.mark.parametrize("command", by_plan("ci"))
def test_a_session_named_bare_is_one_ci_runs(command):
    argv = shlex.split(command.text)
    env = dict(a.split("=", 1) for a in argv if re.match(r"^[A-Z_]+=", a))
    assert argv[len(env) + 2] in ci_sessions(), (command, ci_sessions())
    assert env.items() <= ci_env().items(), (command, ci_env())


@pytest.mark.parametrize("command", by_plan("gpu", "form"))
def test_a_marked_command_is_well_formed(command):
    argv = shlex.split(command.text)
    env = dict(a.split("=", 1) for a in argv if re.match(r"^[A-Z_]+=", a))
    argv = argv[len(env):]
    for value in env.values():
        shlex.split(value)
    if argv[0] == "nox":
        assert argv[1] == "-s" and argv[2] in nox_sessions(), (argv, nox_sessions())
        if "LCH_TORCH" in env:
            assert shlex.split(env["LCH_TORCH"])[0].startswith("torch=="), env
    else:
        module = argv[2]
        done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_a_session_is_ci_s_only_with_what_ci_exports():
    assert plan(Command("x", "LCH_TIERS=all nox -s tests")).how == "ci"     # .ci/run exports it
    with pytest.raises(AssertionError, match="no plan"):
        plan(Command("x", "LCH_TIERS=fast nox -s tests"))


def test_a_gpu_command_without_its_mark_is_not_excused():
    marked = Command("x", 'LCH_TORCH="torch==2.13.0 --index-url X" nox -s tests', GPU_MARK)
    assert plan(marked).how == "gpu"
    with pytest.raises(AssertionError, match="no plan"):    # unmarked: not excused
        plan(Command("x", marked.text))
