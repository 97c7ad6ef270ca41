"""The generated blocks of the README and ``docs/``: each a function of the committed records
(``results/``), registered by name with ``lch.records.renderer``. A block shows figures and
names the records they come from, so a reader can open the data behind every number."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from lch.measure import SETTINGS_ENV
from lch.records import load, renderer
from sim.vllm.release import parse_release

NONE_YET = "(none yet)"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table of ``rows`` under ``header``; with no rows, one that says so (a block
    renders as a table before its first record is committed)."""
    body = rows or [[NONE_YET] + [""] * (len(header) - 1)]
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(map(str, row)) + " |" for row in body])

KINDS = ("mutants", "mutants/old-rule", "history", "bench", "hunt", "gpu", "witnesses",
         "findings")


@renderer("records-index")
def records_index(results: Path) -> str:
    """Every committed record: what it measured, where, when and how long."""
    # The harness commit is in each record, not in the table: documents carry no hashes
    # (lch/test_docs.py), a reader opens the record for it.
    rows = []
    for kind in KINDS:
        for r in load(kind, results):
            m = r["machine"]
            rows.append([f"`results/{kind}/{r['name']}.json`",
                         (r.get("vllm") or {}).get("version", "-"),
                         f"{m['cores']} cores, Python {m['python']}, torch {m['torch']}",
                         r["finished"][:10], f"{r['wall_s']} s"])
    return table(("record", "vLLM", "machine", "finished", "wall"), rows)


def _history_records(results: Path) -> list[dict]:
    return [r for r in load("history", results) if r["summary"].get("releases")]


@renderer("history-matrix")
def history_matrix(results: Path) -> str:
    """Per release and column of each history record: the outcome and its finding groups
    (one per cause), with the time per release and the machine's load."""
    rows = []
    for r in _history_records(results):
        load_avg = (r["machine"].get("load_avg") or ["?"])[0]
        rows += [f"`results/history/{r['name']}.json` (hunt budget {r['summary']['hunt_budget']} "
                 f"per cell; {r['machine']['cores']} cores, load {load_avg} at the end):", "",
                 "| release | column | outcome | finding groups (property, calls) |",
                 "|---|---|---|---|"]
        for item in r["items"]:
            groups = ", ".join(f"`{g['property']}` ({g['calls']})"
                               + (" outside vLLM" if g.get("outside_vllm") else "")
                               for g in item["groups"]) or "-"
            rows.append(f"| {item['release']} | {item['column']} | {item['outcome']} | "
                        f"{groups} |")
        rows.append("")
    return "\n".join(rows) if rows else "(no history record yet)"


@renderer("known-bug-recall")
def known_bug_recall(results: Path) -> str:
    """Per release: the upstream-fixed bugs the harness knows there (``fixtures/
    upstream_bugs.py``, as committed: recall is recomputed from each record's groups, so
    every record is judged by the same table), how many its finding groups are, which were
    missed, and the time the release took."""
    from fixtures.upstream_bugs import recall
    rows = []
    for r in _history_records(results):
        load_avg = (r["machine"].get("load_avg") or ["?"])[0]
        for rel in r["summary"]["releases"]:
            cells = {i["column"]: i["groups"] for i in r["items"]
                     if i["release"] == rel["release"] and i["outcome"] in ("pass",
                                                                            "divergence")}
            known = [k for k in recall(rel["release"], cells) if k["found"] is not None]
            missed = [k["bug"] for k in known if not k["found"]]
            suites = {c: [g for g in groups if g.get("test") != "hunt"]
                      for c, groups in cells.items()}
            before = sum(bool(k["found"]) for k in recall(rel["release"], suites))
            state = "" if rel["complete"] else " (incomplete)"
            rows.append([f"`{r['name']}`", f"{rel['release']}{state}", len(known), before,
                         len(known) - len(missed), ", ".join(missed) or "-",
                         f"{rel['suite_s']:.0f} s", f"{rel['hunt_s']:.0f} s", load_avg])
    return table(("record", "release", "known bugs",
                  "found by the suites alone (history before hunting)", "found with the hunts",
                  "missed", "suite", "hunts", "load"), rows)


@renderer("vllm-session-recall")
def vllm_session_recall(results: Path) -> str:
    """Per record of the session's suites (``lch.measure pytest`` against vLLM, naming some
    of every subsystem's vllm suites): the upstream bugs affecting its release
    (``fixtures/upstream_bugs.py``, as committed), those its expected failures name, those
    missed, and the settings and time of the run. A record of one subsystem's tests is left
    out: the bugs of the others are not missed there, only not looked for."""
    from fixtures.upstream_bugs import UPSTREAM_BUGS
    from sim.manifests import all_manifests
    rows = []
    for r in load("suites", results):
        met = r["summary"].get("known_divergences")
        release = (r.get("vllm") or {}).get("version")
        ran = {word.partition("::")[0] for word in r["command"].split()}   # test files
        if met is None or release is None or not all(
                ran & {s.partition("::")[0] for s in m.vllm_suites}
                for m in all_manifests() if m.vllm_suites):
            continue
        known = [b.id for b in UPSTREAM_BUGS if b.affects(release)]
        # The settings lch.measure writes before the command (the CPU platform left out).
        words = [w for w in r["command"].split() if w.split("=")[0] in SETTINGS_ENV]
        settings = " ".join(w for w in words if not w.startswith("VLLM_TARGET_DEVICE=")) \
            if words else "not recorded"
        load_avg = (r["machine"].get("load_avg") or ["?"])[0]
        rows.append([f"`results/suites/{r['name']}.json`", release, settings or "-",
                     f"{sum(k in met for k in known)} of {len(known)}",
                     ", ".join(k for k in known if k not in met) or "-",
                     f"{r['wall_s']:.0f} s", load_avg])
    return table(("record", "vLLM", "settings", "known bugs met", "missed", "wall", "load"),
                 rows)


@renderer("property-witnesses")
def property_witnesses(results: Path) -> str:
    """Each declared property's witnesses by kind, and the witness suites' run times
    (``python -m lch.witnesses``)."""
    found = [r for r in load("witnesses", results) if r["name"] == "property-witnesses"]
    if not found:
        return "(no record yet: run `python -m lch.witnesses --vllm`)"
    r = found[0]
    rows = ["| subsystem | property | catalogue | scenario | vLLM mutant | test |",
            "|---|---|---|---|---|---|"]
    for item in r["items"]:
        if "property" not in item:
            continue
        cells = [", ".join(f"`{w}`" for w in item[kind]) or "-"
                 for kind in ("catalogue", "scenario", "vllm-mutant", "test")]
        rows.append(f"| {item['subsystem'] or '(every machine)'} | `{item['property']}` | "
                    + " | ".join(cells) + " |")
    m = r["machine"]
    suites = "; ".join(f"{s['suite']} suite {s['outcome']} in {s['wall_s']} s "
                       f"({s['summary_line']})" for s in r["items"] if "suite" in s)
    return "\n".join(rows) + (
        f"\n\n{r['summary']['properties']} declared (subsystem, property) pairs and common "
        f"properties, {len(r['summary']['unwitnessed'])} without a witness. {suites}: on "
        f"{m['cores']} cores, load average {m['load_avg']} (shared); record (with the "
        f"harness commit) "
        f"`results/witnesses/property-witnesses.json`.")




# -- mutation campaigns (lch.mutants --record-dir) ----------------------------------------------

SUITE_TITLES = {"harness": "this harness", "upstream": "vLLM's own tests"}
OTHER_OUTCOMES = ("survived", "timeout", "crash", "unavailable", "unnamed", "error")


def _old_rule(results: Path) -> dict[str, dict]:
    """Campaigns run with the code before ``lch/kills.py`` (``results/mutants/old-rule/``),
    by record name: the figures of the old kill rule, measured."""
    folder = results / "mutants" / "old-rule"
    if not folder.is_dir():
        return {}
    return {r["name"]: r for r in load("mutants/old-rule", results)}


def _class_order(record: dict) -> tuple:
    from lch.suites import CLASSES
    spec = record["summary"]["class"]
    return (list(CLASSES).index(spec) if spec in CLASSES else len(CLASSES), record["name"])


@renderer("mutation-scores")
def mutation_scores(results: Path) -> str:
    """Per class and suite: the mutants killed by the kill rules (``lch/kills.py``) and every
    other outcome, the old rule's count in the same run, the old code's where it was run."""
    old = _old_rule(results)
    rows = ["| class | mutants (argued equivalent) | suite | killed | score | "
            + " | ".join(OTHER_OUTCOMES) + " | any failure (the old rule, same run) | "
            "old code (its rule, own run) | record |",
            "|---|---|---|---|---|" + "---|" * len(OTHER_OUTCOMES) + "---|---|---|"]
    for r in sorted(load("mutants", results), key=_class_order):
        summary = r["summary"]
        short = summary["class"].rpartition(":")[2]
        counts = f"{summary['mutants']} ({summary['equivalent']})"
        for suite, s in summary["suites"].items():
            title = SUITE_TITLES.get(suite, suite)
            if "could_not_run" in s:
                rows.append(f"| `{short}` | {counts} | {title} | could not run: "
                            f"{s['could_not_run']} | |" + " |" * len(OTHER_OUTCOMES)
                            + f" | | `results/mutants/{r['name']}.json` |")
                continue
            before = old.get(r["name"], {}).get("summary", {}).get("suites", {}).get(suite)
            old_cell = (f"{before['killed']} / {before['of']} "
                        f"(`results/mutants/old-rule/{r['name']}.json`)" if before else "-")
            rows.append(f"| `{short}` | {counts} | {title} | {s['killed']} / {s['of']} | "
                        f"{s['score_percent']}% | "
                        + " | ".join(str(s[o]) for o in OTHER_OUTCOMES)
                        + f" | {s['any_failure']} / {s['of']} | {old_cell} | "
                        f"`results/mutants/{r['name']}.json` |")
    if len(rows) == 2:
        rows.append("| (none yet) |" + " |" * (len(OTHER_OUTCOMES) + 8))
    return "\n".join(rows)


@renderer("mutation-summary")
def mutation_summary(results: Path) -> str:
    """The README's short form of ``mutation-scores``: per class, the kills by the rules of
    each suite (the outcomes beside them are in docs/mutation-testing.md)."""
    rows = []
    for r in sorted(load("mutants", results), key=_class_order):
        summary, cells = r["summary"], []
        for suite in ("harness", "upstream"):
            s = summary["suites"].get(suite)
            if s is None or "could_not_run" in s:
                cells.append("could not run offline")
            else:
                cells.append(f"{s['killed']} ({s['score_percent']}%)")
        rows.append([f"`{summary['class'].rpartition(':')[2]}` ({summary['release']})",
                     summary["ran"], *cells])
    return table(("class (vLLM release)", "mutants run", "killed by this harness",
                  "by vLLM's own tests"), rows)


@renderer("mamba-mtp")
def mamba_mtp(results: Path) -> str:
    """The Mamba + MTP stall in the world vLLM builds (``python -m lch.mamba_mtp``): the
    world's settings as vLLM set them, then every case and where it stopped."""
    found = _mamba_mtp_records(results)
    if not found:
        return "(no record yet: run `python -m lch.mamba_mtp --record-dir results`)"
    r, others = found[0], found[1:]
    w, m = r["summary"]["world"], r["machine"]
    spec = w["mamba_spec"]
    lines = [
        f"Record `results/findings/mamba-mtp.json` (with the harness commit): vLLM "
        f"{r['vllm']['version']}, {m['cores']} cores (load "
        f"{m['load_avg']}), {r['wall_s']} s.",
        "",
        "| setting (read back from vLLM's objects) | value |", "|---|---|",
        f"| architecture, platform | {w['architecture']}, {w['platform']} |",
        f"| drafter | {w['speculative_method']}, {w['num_speculative_tokens']} speculative "
        f"tokens, multi-module MTP: {w['multi_module_mtp']} |",
        f"| prefill lookahead / hash lookahead | {w['num_prefill_lookahead_tokens']} / "
        f"{w['num_hash_lookahead_tokens']} |",
        f"| prefix caching, mamba_cache_mode | {w['enable_prefix_caching']}, "
        f"{w['mamba_cache_mode']} |",
        f"| block size (scheduler, Mamba, hash) | {w['block_size']}, "
        f"{w['mamba_block_size']}, {w['hash_block_size']} |",
        f"| MambaSpec from the layers | shapes {spec['shapes']}, dtypes {spec['dtypes']}, "
        f"speculative blocks {spec['num_speculative_blocks']}, prefill checkpoint blocks "
        f"{spec['num_prefill_checkpoint_blocks']} |",
        f"| KV cache groups (spec, block, layers) | {w['kv_cache_groups']} |",
        f"| max_num_seqs, chunked prefill | {w['max_num_seqs']}, "
        f"{w['enable_chunked_prefill']} |",
        f"| one-module control: prefill lookahead | "
        f"{r['summary']['one_module_world']['num_prefill_lookahead_tokens']} |",
        "",
        "| case | budget | prompts | outcome | tokens per pass |", "|---|---|---|---|---|"]
    for item in r["items"]:
        passes = item["tokens_per_pass"]
        shown = ", ".join(str(p) for p in passes if p)
        idle = sum(1 for p in passes if not p)
        if idle:
            shown += f"; then {idle} passes with no token"
        outcome = item["outcome"] if item["outcome"] == "finished" else \
            f"**stalled** at {item['stalled_at']}"
        lines.append(f"| `{item['id']}` | {item['budget']} | {item['prompts']} | {outcome} | "
                     f"{shown} |")
    lines += ["", f"Stalled: {len(r['summary']['stalled'])} of {r['summary']['cases']} "
              f"cases; one-module control: {len(r['summary']['control_stalled'])} of "
              f"{r['summary']['control_cases']}."]
    for other in others:
        o = other["summary"]
        cases = "the same cases" if o["stalled"] == r["summary"]["stalled"] else \
            "other cases: " + ", ".join(o["stalled"])
        world = "the same" if o["world"] == w else "different (see the record)"
        lines += ["", f"vLLM {other['vllm']['version']} (`results/findings/{other['name']}"
                  f".json`, {other['wall_s']} s): stalled {len(o['stalled'])} of {o['cases']} "
                  f"cases ({cases}); one-module control: {len(o['control_stalled'])} of "
                  f"{o['control_cases']}; the world's settings read back: {world}."]
    return "\n".join(lines)


def _mamba_mtp_records(results: Path) -> list[dict]:
    """The Mamba + MTP stall's records (``mamba-mtp``: the default release's; ``mamba-mtp-X``:
    release X's), the default release's first, then by release."""
    found = [r for r in load("findings", results)
             if r["name"] == "mamba-mtp" or r["name"].startswith("mamba-mtp-")]
    return sorted(found, key=lambda r: (r["name"] != "mamba-mtp",
                                        parse_release(r["vllm"]["version"])))


# -- the README's findings table -----------------------------------------------------------------

VLLM_REFERENCE = re.compile(r"(?:(issue|PR) )?(#\d{4,6})")
PREFIX_CACHE_REPORTS = ("prefix-cache/history", "prefix-cache/history-0.33.0")


def _vllm_references(source: str) -> str:
    """``issue #N`` / ``PR #N`` out of a catalogue entry's source text, in its order."""
    refs, kind = [], ""
    for word, number in VLLM_REFERENCE.findall(source):
        kind = word or kind
        refs.append(f"{kind} {number}".strip())
    return ", ".join(refs) or "-"


def _found_in_records(bug, results: Path) -> str:
    """The releases whose history records credit this bug to a finding group, and those it
    affects where the column ran and no record credited it (each release once; a miss only by
    runs without hunts, whose cells stop at their first divergence, says so)."""
    found, covered, hunted = set(), set(), set()
    for r in _history_records(results):
        for item in r["items"]:
            if item["column"] != bug.column or not bug.affects(item["release"]):
                continue
            if bug.id in item.get("known_found", []):
                found.add(item["release"])
            elif item["outcome"] in ("pass", "divergence"):
                covered.add(item["release"])
                # --no-hunt records its budget as "0 examples"
                if not str(r["summary"].get("hunt_budget", "0")).startswith("0"):
                    hunted.add(item["release"])
    missed = covered - found
    if not found and not missed:
        return "no record covers these releases"

    def listed(releases) -> str:
        return ", ".join(sorted(releases, key=_release_key))
    text = listed(found) or "-"
    if missed:
        text += f" (missed on {listed(missed)}" + ("" if missed & hunted else
                                                   ", by the suites alone: no hunt ran") + ")"
    return text


@renderer("findings")
def findings(results: Path) -> str:
    """One row per divergence the harness found in real vLLM releases: the catalogue of
    ``fixtures/upstream_bugs.py`` judged by the history records, the Mamba + MTP stall's
    record, and the prefix cache's history reports. Links are relative to the repository's
    root: the block is the README's."""
    from fixtures.upstream_bugs import UPSTREAM_BUGS
    rows = ["| bug | vLLM | releases affected | found by `history` in | property | reproducer |",
            "|---|---|---|---|---|---|"]
    for bug in UPSTREAM_BUGS:
        until = f"fixed in {bug.fixed_in}" if bug.fixed_in else "open in every release read"
        rows.append(f"| {bug.summary} | {_vllm_references(bug.source)} | from {bug.since}, "
                    f"{until} | {_found_in_records(bug, results)} | `{bug.property}` | "
                    f"[{bug.reproducer}](fixtures/reproducers/{bug.reproducer}) |")
    stalls = _mamba_mtp_records(results)
    if stalls:
        s = stalls[0]["summary"]
        driven = sorted((r for r in stalls if r["summary"]["stalled"]),
                        key=lambda r: parse_release(r["vllm"]["version"]))
        versions = ", ".join(r["vllm"]["version"] for r in driven)
        paths = ", ".join(f"`results/findings/{r['name']}.json`" for r in driven)
        rows.append(f"| a hybrid Mamba model's prefill under a multi-module MTP drafter never "
                    f"finishes ({len(s['stalled'])} of {s['cases']} cases stall; "
                    f"[details](docs/findings/mamba-mtp.md)) | - | {versions} (the releases "
                    f"driven) | {paths} | "
                    f"`liveness` | [test_scheduler_pass_vllm_mamba_mtp_stall.py]"
                    f"(fixtures/reproducers/test_scheduler_pass_vllm_mamba_mtp_stall.py) |")
    history = [f"`results/history/{r['name']}.json`" for r in _history_records(results)]
    outcomes, sources = _prefix_cache_outcomes(results)
    # The records are named where their matrices are (docs/history.md), not here: the
    # README is for users, and a list of file names tells them nothing.
    lines = ["\n".join(rows), "", f"History records: {len(history)} under `results/history/`, "
             f"each with its release-by-column matrix in [docs/history.md](docs/history.md)."]
    if sources:
        # Each release is judged by its latest run; an earlier run whose outcome differs was
        # made by a harness commit a later one corrected, and is named as such, not hidden.
        latest = {rel: max(seen)[1] for rel, seen in outcomes.items()}

        def releases(outcome: str) -> str:
            return ", ".join(sorted((rel for rel, last in latest.items() if last == outcome),
                                    key=_release_key)) or "none"
        earlier = [f"{rel} {WORDS[outcome]}" for rel in sorted(outcomes, key=_release_key)
                   for outcome in sorted({o for _, o in outcomes[rel]} - {latest[rel]})]
        superseded = (f"; superseded by a later run: {', '.join(earlier)} (a harness defect "
                      f"mended, or worlds added since: [prefix-cache.md](docs/prefix-cache.md))"
                      ) if earlier else ""
        lines.append(f"Prefix cache (`KVCacheManager`), each release's latest run: diverged on "
                     f"{releases('divergence')}; passed on {releases('pass')}; could not run "
                     f"on {releases('unavailable')} ({len(sources)} runs){superseded}; vLLM "
                     f"issue #42571 (a block listed twice in one `free_blocks` call) is not "
                     f"reached through the manager's own callers "
                     f"([prefix-cache.md](docs/prefix-cache.md)).")
    return "\n".join(lines)


WORDS = {"divergence": "diverged", "pass": "passed", "unavailable": "could not run"}


def _prefix_cache_outcomes(results: Path) -> tuple[dict[str, set[tuple[str, str]]], list[str]]:
    """Release -> (when, outcome) of each of its prefix-cache cells, over the prefix cache's
    history reports (the oldest runs: when "") and every history record with that column
    (when: the record's start); and the files read."""
    outcomes: dict[str, set[tuple[str, str]]] = {}
    sources = []
    for name in PREFIX_CACHE_REPORTS:
        path = results / name / "history-report.json"
        if path.is_file():
            sources.append(f"`results/{name}/history-report.json`")
            for rel in json.loads(path.read_text())["releases"]:
                outcomes.setdefault(rel["release"], set()).add(
                    ("", rel["cells"]["prefix_cache"]["outcome"]))
    for r in _history_records(results):
        cells = [i for i in r["items"] if i["column"] == "prefix_cache"]
        if cells:
            sources.append(f"`results/history/{r['name']}.json`")
        for cell in cells:
            outcomes.setdefault(cell["release"], set()).add((r["started"], cell["outcome"]))
    return outcomes, sources


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in release.split("."))


@renderer("gpu-runs")
def gpu_runs(results: Path) -> str:
    """Each run of ``tools/gpu_check.sh`` on a lent GPU: per step, its outcome and what it
    ran (the record has each test's streams, delays and vLLM's copy paths)."""
    rows = []
    for r in load("gpu", results):
        s = r["summary"]
        where = f"`results/gpu/{r['name']}.json` ({s['device']}, torch {s['torch']}, " \
                f"CUDA {s['cuda']}, {r['finished'][:10]})"
        for item in r["items"]:
            rows.append([where, item["step"], item["outcome"], item["detail"]])
            where = ""
    return table(("record", "step", "outcome", "what ran"), rows)
