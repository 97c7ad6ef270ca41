"""The hunt report: ``hunt-report.json`` (for scripts) and ``hunt-report.md`` (for people, and
``$GITHUB_STEP_SUMMARY`` when set), both written atomically.

The markdown says what ran (a row per pair, "not run" when a pair got no example, never "no
failure"), every new divergence (each with its finding id, for ``--accept``) apart from the
accepted ones and the example database's replays, what was not covered and
why, the hazards a pair never reached (a green pair that never evicted checked little), and
ends with the exact command to rerun each failure.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from lch.hunt import HuntReport, PairReport
from sim.files import atomic_write, check_writable  # noqa: F401 - the CLI's entry points


def to_json(report: HuntReport) -> dict:
    return {"seed": report.seed, "budget_s": report.budget_s, "examples": report.examples,
            "command": report.command, "interrupted": report.interrupted,
            "elapsed_s": round(report.elapsed_s, 2), "setup_s": round(report.setup_s, 2),
            "vllm": report.vllm,
            "pairs": [_pair_json(p) for p in report.pairs]} | (
                {"partial": True} if report.partial else {})


def _pair_json(p: PairReport) -> dict:
    return {"subsystem": p.subsystem, "target": p.target, "result": p.result, "why": p.why,
            "examples": p.examples, "steps": p.steps, "rounds": p.rounds,
            "seconds": round(p.seconds, 2),
            "steps_per_s": round(p.steps / p.seconds) if p.seconds else 0,
            "events": dict(sorted(p.events.items())),
            "hazards_never_reached": [h for h in p.hazards if not p.events.get(h)]
            if p.examples else [],
            "failure": p.failure, "findings": p.findings,
            "adopted": dict(sorted(p.adopted.items())),
            "accepted": sorted(p.accepted.values(), key=lambda a: a["id"]),
            "unconfirmed": p.unconfirmed, "cut_rounds": p.cut_rounds,
            "database_replay": p.replayed,
            "database_examples": p.replayed_examples, "trace_hash": p.trace_hash}


def render_markdown(data: dict) -> str:
    scope = (f"{data['examples']} examples per pair" if data["examples"]
             else f"budget {data['budget_s']:.0f}s")
    lines = [f"# Hunt report (seed {data['seed']}, {scope})", "",
             f"Searched {data['elapsed_s']:.1f}s after {data['setup_s']:.1f}s of setup "
             "(imports, vLLM); command: `" + data["command"] + "`", ""]
    if data["interrupted"]:
        lines += ["**Interrupted**: this report is partial; the reproducers found so far "
                  "are written.", ""]
    elif data.get("partial"):
        lines += ["**Partial**: written at the last finding while the hunt ran (a checkpoint); "
                  "a hunt that ended normally overwrites it.", ""]
    if data["vllm"]:
        v = data["vllm"]
        lines += [f"vLLM under test: {v.get('version')} at `{v.get('path')}`"
                  + (f", commit `{v['commit']}`" if v.get("commit") else
                     ", not a git checkout (no commit)" if v.get("git") is False else ""),
                  ""]
    lines += ["| subsystem | target | result | examples | steps | steps/s |",
              "|---|---|---|---|---|---|"]
    for p in data["pairs"]:
        lines.append(f"| {p['subsystem']} | {p['target']} | {_result(p)} | {p['examples']} | "
                     f"{p['steps']} | {p['steps_per_s']} |")
    lines += _section("New divergences found by this hunt (each accepted once found)", [
        f"- {p['subsystem']} x {p['target']}: {_finding(f)}"
        for p in data["pairs"] for f in p.get("findings") or []])
    lines += _section("Went on past (each accepted finding's check adopted the target's "
                      "behaviour and the example continued)", [
        f"- {p['subsystem']} x {p['target']}: `{finding}`: {what}"
        for p in data["pairs"] for finding, what in (p.get("adopted") or {}).items()])
    lines += _section("Accepted divergences (--accept): counted, not reported as new", [
        f"- {p['subsystem']} x {p['target']}: `{a['id']}` seen {a['seen']} times"
        + ("" if a["seen"] else " (not reached: fixed here, or give a larger budget)")
        for p in data["pairs"] for a in p.get("accepted") or []])
    lines += _section("Left unnamed (not minimized: the budget ended, or a round minimized "
                      "enough)", [
        f"- {p['subsystem']} x {p['target']}: " + ", ".join(
            t for t in (f"{p['unconfirmed']} failures of accepted properties left unminimized"
                        if p.get("unconfirmed") else "",
                        f"{p['cut_rounds']} rounds ended after {_per_round()} minimizations"
                        if p.get("cut_rounds") else "") if t)
        for p in data["pairs"] if p.get("unconfirmed") or p.get("cut_rounds")])
    lines += _section("Failures replayed from the example database (earlier hunts)", [
        f"- {p['subsystem']} x {p['target']}: {_finding(p['database_replay'])}"
        for p in data["pairs"] if p["database_replay"]])
    lines += _section("Not covered", [
        f"- {p['subsystem']} x {p['target']}: {p['result']}" + (f" ({p['why']})"
                                                                if p["why"] else "")
        for p in data["pairs"] if p["result"] not in ("failed", "no failure")])
    lines += _section("Hazards never reached (a pass there checked less)", [
        f"- {p['subsystem']} x {p['target']}: {', '.join(p['hazards_never_reached'])}"
        for p in data["pairs"] if p["hazards_never_reached"]])
    lines += _section("Hazards reached (examples that reached each)", [
        f"- {p['subsystem']} x {p['target']}: "
        + ", ".join(f"{k} x{v}" for k, v in p["events"].items())
        for p in data["pairs"] if p["events"]])
    lines += _section("Rerun", rerun_commands(data))
    return "\n".join(lines) + "\n"


def _per_round() -> int:
    from lch.hunt import MINIMIZE_PER_ROUND
    return MINIMIZE_PER_ROUND


def _result(p: dict) -> str:
    findings = p.get("findings") or ([p["failure"]] if p["failure"] else [])
    own = [f for f in findings if f.get("on_release") != "fails"]
    if own:
        return f"**failed: {', '.join(f['property'] for f in own)}**"
    if findings:
        return ("the release diverges too (not your change): "
                f"{', '.join(f['property'] for f in findings)}")
    if p["database_replay"]:
        return f"**failed (database replay): {p['database_replay']['property']}**"
    return p["result"]


def _finding(f: dict) -> str:
    note = "" if f["minimized"] else " (minimization cut short)"
    text = f"**{f['property']}** in {f['calls']} calls{note}: {f['message']}; `{f['reproducer']}`"
    if f.get("id"):
        text += f"; id `{f['id']}`"
    if f.get("signature"):
        text += f"; signature `{f['signature']}`"
    if f.get("seen", 1) > 1:
        text += f", seen {f['seen']} times"
    if len(f.get("programs") or []) > 1:
        text += f" in {len(f['programs'])} minimal programs"
    if f.get("went_past"):
        text += f"; reached past {', '.join(f'`{i}`' for i in f['went_past'])}"
    if f.get("upstream_reproducer"):
        text += f"; vLLM-only test `{f['upstream_reproducer']}`"
    on_release = f.get("on_release")
    if on_release == "fails":
        text += "; **the release fails it too: not your checkout's change**"
    elif on_release == "passes":
        text += "; the release passes it: **your checkout's change**"
    elif on_release:
        text += f"; on the release alone it {on_release}"
    return text


def _section(title: str, lines: list[str]) -> list[str]:
    return ["", f"## {title}", "", *lines] if lines else []


def rerun_commands(data: dict) -> list[str]:
    """The commands that rerun each failure: its reproducer, and the hunt round found it."""
    out = []
    checkout = (data.get("vllm") or {}).get("checkout")
    vllm_path = f" --vllm-path {shlex.quote(checkout)}" if checkout else ""
    env = (f"PYTHONPATH=$(python -m sim.vllm.overlay {shlex.quote(checkout)}) "
           if checkout else "")
    for p in data["pairs"]:
        for found in [*(p.get("findings") or [p["failure"]]), p["database_replay"]]:
            if not found:
                continue
            out.append(f"- {p['subsystem']} x {p['target']}:")
            path = shlex.quote(found["reproducer"])
            out.append(f"  `{env}python -m pytest -p no:cacheprovider {path}`")
            if found.get("upstream_reproducer"):
                out.append(f"  vLLM and pytest only: `{env}python -m pytest -p no:cacheprovider "
                           f"{shlex.quote(found['upstream_reproducer'])}`")
            if found.get("rerun_examples"):
                out.append(f"  `python -m lch.cli hunt --seed {data['seed']} --target "
                           f"{p['target']} --subsystem {p['subsystem']} --examples "
                           f"{found['rerun_examples']} --no-db{vllm_path}`")
    return out


def write_report(report: HuntReport, directory: str | os.PathLike,
                 summary: bool = True) -> str:
    """Write both files atomically (and, with ``summary``, the CI step summary); returns the
    markdown."""
    out = Path(directory)
    data = to_json(report)
    markdown = render_markdown(data)
    atomic_write(out / "hunt-report.json", json.dumps(data, indent=2) + "\n")
    atomic_write(out / "hunt-report.md", markdown)
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY") if summary else None
    if step_summary:
        with open(step_summary, "a") as handle:
            handle.write(markdown)
    return markdown


