"""``bisect``: run the vllm suites over a range of vLLM releases, each in its own venv, and
name the release where the outcome changes (the first failing one, with its reproducer).

    python -m lch.cli bisect --from 0.10.2 --to 0.33.0          # binary search on the ends
    python -m lch.cli bisect --releases 0.10.2,0.20.0,0.33.0     # just these, in order

Releases come from ``pip index versions vllm`` (final releases only). A venv per release
lives under ``--venv-dir`` (default ``.nox/bisect``) and is reused on a second run. When the
two ends agree, every release between is run (there may be a failure in the middle).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from attrs import define, field

from sim.errors import HarnessError
from sim.vllm.release import check_supported, parse_release, requirements_file

ROOT = Path(__file__).resolve().parents[1]
SUITES = ("properties/test_encoder_cache.py", "properties/test_vllm_target.py")
TEST_PINS = ("attrs==26.1.0", "hypothesis==6.155.2", "pytest==9.0.3", "pytest-xdist==3.8.0")


@define
class Outcome:
    release: str
    passed: bool | None = None          # None: could not install or import
    install_s: float = 0.0
    run_s: float = 0.0
    summary: str = ""
    reproducers: list[str] = field(factory=list)

    def row(self) -> str:
        verdict = {True: "pass", False: "FAIL", None: "error"}[self.passed]
        found = ", ".join(self.reproducers) or "-"
        return (f"| {self.release} | {self.install_s:.0f} s | {self.run_s:.0f} s | {verdict} | "
                f"{self.summary} | {found} |")


def available_releases() -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "vllm"],
                         capture_output=True, text=True, check=False).stdout
    match = re.search(r"Available versions:\s*(.+)", out)
    if not match:
        raise HarnessError("`pip index versions vllm` listed nothing; give --releases A,B,C")
    found = [v.strip() for v in match.group(1).split(",")]
    return sorted((v for v in found if re.fullmatch(r"\d+\.\d+\.\d+(\.\d+)?", v)),
                  key=parse_release)


def releases_between(first: str, last: str) -> list[str]:
    check_supported(first)
    lo, hi = parse_release(first), parse_release(last)
    chosen = [v for v in available_releases() if lo <= parse_release(v) <= hi]
    if not chosen:
        raise HarnessError(f"no vLLM release between {first} and {last}")
    return chosen


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "-q", *args], check=True,
                   stdout=subprocess.DEVNULL)


def install(release: str, venv: Path) -> Path:
    """A venv with torch (LCH_TORCH), the harness, vLLM ``release`` without its GPU
    dependencies and its family's requirements; reused when already there."""
    python = venv / "bin" / "python"
    marker = venv / f".vllm-{release}"
    if marker.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    _pip(python, *shlex.split(os.environ.get("LCH_TORCH", "torch==2.13.0")))
    _pip(python, "--no-deps", "-e", str(ROOT), *TEST_PINS)
    _pip(python, "--no-deps", f"vllm=={release}")
    _pip(python, "--no-deps", "-r", str(requirements_file(release)))
    _pip(python, "execnet", "iniconfig", "pluggy", "sortedcontainers")
    marker.touch()
    return python


def run_release(release: str, venv_dir: Path, out_dir: Path, pytest_args: list[str]) -> Outcome:
    outcome = Outcome(release)
    began = time.monotonic()
    try:
        python = install(release, venv_dir / f"vllm-{release}")
    except (subprocess.CalledProcessError, HarnessError) as error:
        outcome.install_s, outcome.summary = time.monotonic() - began, f"install: {error}"
        return outcome
    outcome.install_s = time.monotonic() - began
    found_dir = out_dir / f"vllm-{release}"
    env = {**os.environ, "HYPOTHESIS_PROFILE": os.environ.get("HYPOTHESIS_PROFILE", "ci"),
           "LCH_REQUIRE_TARGETS": "1", "VLLM_TARGET_DEVICE": "cpu"}
    check = subprocess.run([str(python), "-m", "sim.vllm.release", "check"], cwd=ROOT, env=env,
                           capture_output=True, text=True, check=False)
    if check.returncode != 0:                   # names the missing module and the file
        outcome.summary = "import: " + check.stderr.strip().splitlines()[-1][:300]
        return outcome
    began = time.monotonic()
    run = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "--target", "vllm", "--reproducer-dir", str(found_dir),
                          *SUITES, *pytest_args],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    outcome.run_s = time.monotonic() - began
    lines = [ln for ln in run.stdout.splitlines() if ln.strip()]
    outcome.summary = lines[-1].strip("= ") if lines else f"exit {run.returncode}"
    failures = [ln.split(" - ", 1)[-1] for ln in lines if ln.startswith("FAILED")]
    if failures:
        outcome.summary += "; " + "; ".join(failures)
    outcome.passed = run.returncode == 0
    if run.returncode not in (0, 1):
        outcome.passed = None
    outcome.reproducers = sorted(str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p)
                                 for p in found_dir.glob("test_*.py"))
    return outcome


def bisect(releases: list[str], search: bool, venv_dir: Path, out_dir: Path,
           pytest_args: list[str]) -> list[Outcome]:
    """Run the ends, then binary-search the change between them; without ``search`` (or
    when the ends agree) run every release."""
    done: dict[str, Outcome] = {}

    def run(k: int) -> Outcome:
        if releases[k] not in done:
            print(f"vllm {releases[k]}: installing and running ...", flush=True)
            done[releases[k]] = run_release(releases[k], venv_dir, out_dir, pytest_args)
            print("  " + done[releases[k]].row(), flush=True)
        return done[releases[k]]

    lo, hi = 0, len(releases) - 1
    if search and run(lo).passed is not None and run(hi).passed is not None \
            and run(lo).passed != run(hi).passed:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if run(mid).passed is None:
                break
            lo, hi = (mid, hi) if run(mid).passed == run(lo).passed else (lo, mid)
    else:
        for k in range(len(releases)):
            run(k)
    return [done[v] for v in releases if v in done]


def report(outcomes: list[Outcome]) -> str:
    lines = ["| release | install | suite | result | summary | reproducers |",
             "|---|---|---|---|---|---|", *(o.row() for o in outcomes)]
    for before, after in zip(outcomes, outcomes[1:], strict=False):
        if before.passed is not None and after.passed is not None \
                and before.passed != after.passed:
            change = "first failing" if after.passed is False else "first passing"
            lines.append(f"\n{change} release: {after.release} (after {before.release})")
    return "\n".join(lines)


def main(args) -> int:
    if args.releases:
        releases = [v.strip() for v in args.releases.split(",") if v.strip()]
        for v in releases:
            check_supported(v)
    else:
        releases = releases_between(args.first, args.last)
    print(f"bisect over {len(releases)} release(s): {', '.join(releases)}", flush=True)
    outcomes = bisect(releases, not args.releases and not args.linear, Path(args.venv_dir),
                      Path(args.reproducer_dir), args.pytest_args)
    text = report(outcomes)
    print(text)
    Path(args.report).write_text(text + "\n")
    return 0 if all(o.passed for o in outcomes) else 1
