"""A mutation campaign's report (``mutants-<Class>.json`` / ``.md``) and its record.

Every mutant has, per suite, one outcome of ``lch.kills.OUTCOMES``; a suite's score counts
only ``killed`` (a declared property, or vLLM raising on a call the model accepts; for vLLM's
tests, an assertion or vLLM raising) over the mutants not argued equivalent, and every other
outcome is its own column beside it. ``any_failure`` is what the rule before ``lch/kills.py``
counted as a kill (any failing test, a timeout or a crash), kept for comparison.
"""

from __future__ import annotations

from collections import Counter

from lch import records
from lch.kills import OUTCOMES

NOT_RUN = {"outcome": "not run", "seconds": 0.0, "cpu_seconds": 0.0}
COLUMNS = tuple(o for o in OUTCOMES if o != "killed")   # shown beside the score
MESSAGE_MAX = 200


def _failed_any(result: dict) -> bool:
    """The old rule's kill: any failing test (whatever failed it), a timeout or a crash."""
    return result["outcome"] in ("killed", "timeout", "crash") or bool(result.get("failures"))


def build(spec, release, everything, selected, argued, runs, baseline, could_not_run,
          results, wall_s) -> dict:
    rows = []
    for m in selected:
        outcomes = {name: results.get(m.id, {}).get(name, NOT_RUN) for name in runs}
        rows.append({"id": m.id, "method": m.method, "line": m.line, "operator": m.operator,
                     "diff": m.diff, "equivalent": argued.equivalent.get(m.diff),
                     "formerly_equivalent": argued.formerly.get(m.diff), **outcomes})
    counted = [r for r in rows if r["equivalent"] is None]
    ran = [r for r in rows if any(r[name] is not NOT_RUN for name in runs)]
    report = {"class": spec, "release": release, "mutants": len(everything),
              "ran": len(ran), "operators": dict(Counter(m.operator for m in everything)),
              "equivalent": len(rows) - len(counted),
              "formerly_equivalent": sum(r["formerly_equivalent"] is not None for r in rows),
              "wall_s": round(wall_s, 1), "suites": {}, "stale_equivalents": argued.stale,
              "results": rows}
    for name, run in runs.items():
        if name in could_not_run:
            report["suites"][name] = {"tests": list(run.shown),
                                      "could_not_run": could_not_run[name]}
            continue
        report["suites"][name] = _suite(name, run, baseline[name], rows, counted, ran)
    scored = [n for n in runs if n not in could_not_run]
    if "upstream" in scored:
        both = [(r["id"], r["harness"]["outcome"] == "killed",
                 r["upstream"]["outcome"] == "killed") for r in counted]
        report["only_harness"] = [i for i, h, u in both if h and not u]
        report["only_upstream"] = [i for i, h, u in both if u and not h]
        report["killed_by_either"] = sum(h or u for _, h, u in both)
    return report


def _suite(name, run, baseline, rows, counted, ran) -> dict:
    outcomes = Counter(r[name]["outcome"] for r in counted)
    killed = outcomes["killed"]
    any_failure = sum(_failed_any(r[name]) for r in counted)
    seconds = [r[name]["seconds"] for r in ran if r[name] is not NOT_RUN]
    equivalents = [r for r in rows if r["equivalent"] is not None]
    return {
        "tests": list(run.shown), "rule": run.judge,
        "baseline_s": round(baseline["wall"], 1), "baseline_cpu_s": round(baseline["cpu"], 1),
        "killed": killed, "of": len(counted),
        "score_percent": round(100 * killed / max(1, len(counted)), 1),
        **{column: outcomes[column] for column in COLUMNS},
        "not_run": outcomes["not run"],
        "equivalent": len(equivalents),
        "equivalents_run": sum(r[name] is not NOT_RUN for r in equivalents),
        "equivalents_killed": [r["id"] for r in equivalents if r[name]["outcome"] == "killed"],
        "any_failure": any_failure,
        "any_failure_percent": round(100 * any_failure / max(1, len(counted)), 1),
        "kills_by_property": dict(Counter(r[name].get("property") for r in counted
                                          if r[name]["outcome"] == "killed").most_common()),
        "survivors": [r["id"] for r in counted if r[name]["outcome"] == "survived"],
        "not_killed": {column: [r["id"] for r in counted if r[name]["outcome"] == column]
                       for column in COLUMNS if column != "survived" and outcomes[column]},
        "seconds_mean": round(sum(seconds) / max(1, len(seconds)), 2),
        "seconds_max": round(max(seconds, default=0), 2)}


def scored(report: dict) -> dict[str, dict]:
    return {n: s for n, s in report["suites"].items() if "could_not_run" not in s}


def summary(report: dict) -> str:
    lines = [f"{report['class']} on vLLM {report['release']}: {report['ran']} mutants run, "
             f"{report['equivalent']} argued equivalent, {report['wall_s']:.0f} s"]
    for name, s in report["suites"].items():
        if "could_not_run" in s:
            lines.append(f"  {name:8}: could not run ({s['could_not_run']})")
            continue
        others = ", ".join(f"{c} {s[c]}" for c in COLUMNS if s[c])
        lines.append(f"  {name:8}: {s['killed']}/{s['of']} killed by the rule "
                     f"({s['score_percent']}%); {others or 'nothing else'}; "
                     f"any failure (the old rule) {s['any_failure']}/{s['of']}")
    if "only_harness" in report:
        lines.append(f"  only the harness kills {', '.join(report['only_harness']) or 'none'}; "
                     f"only upstream kills {', '.join(report['only_upstream']) or 'none'}")
    for name, s in scored(report).items():
        if s["equivalents_killed"]:
            lines.append(f"  {name}: argued equivalent but killed: {s['equivalents_killed']}")
    return "\n".join(lines)


def render_markdown(report: dict) -> str:
    by_id = {r["id"]: r for r in report["results"]}
    names = list(scored(report))
    ops = ", ".join(f"{k} {v}" for k, v in sorted(report["operators"].items()))
    out = [f"# Mutants of `{report['class']}` (vLLM {report['release']})", "",
           f"{report['mutants']} mutants in the class's methods ({ops}); {report['ran']} run; "
           f"{report['equivalent']} argued equivalent (`fixtures/mutants/{report['release']}/`)"
           f", {report['formerly_equivalent']} formerly argued equivalent and now counted. "
           f"Campaign wall time {report['wall_s']:.0f} s.", "",
           "Killed: a declared property failed, or vLLM raised on a call the model accepts "
           "(vLLM's own tests: an assertion failed, or vLLM raised). Every other outcome is "
           "its own column; *any failure* is the old rule's count (any failing test, a "
           "timeout or a crash).", "",
           "| suite | killed | score | " + " | ".join(COLUMNS) + " | equivalent | any failure "
           "| unmutated run (CPU) | s per mutant (mean, max) |",
           "|---|---|---|" + "---|" * len(COLUMNS) + "---|---|---|---|"]
    for name, s in report["suites"].items():
        if "could_not_run" in s:
            out.append(f"| {name} | could not run: {s['could_not_run']} |")
            continue
        out.append(f"| {name} | {s['killed']} / {s['of']} | {s['score_percent']}% | "
                   + " | ".join(str(s[c]) for c in COLUMNS)
                   + f" | {s['equivalent']} | {s['any_failure']} / {s['of']} | "
                   f"{s['baseline_s']} s ({s['baseline_cpu_s']} s) | "
                   f"{s['seconds_mean']}, {s['seconds_max']} |")
    for name in names:
        s = report["suites"][name]
        out += ["", f"## Kills by property: {name}", ""]
        out += [f"- `{p}`: {n}" for p, n in s["kills_by_property"].items()] or ["none"]
        out += ["", f"## Not killed: {name}", ""]
        rows = [(c, i) for c in COLUMNS for i in
                ([*s["survivors"]] if c == "survived" else s["not_killed"].get(c, []))]
        out += [f"- {i} {c}: `{by_id[i]['diff']}`" + _why(by_id[i][name])
                for c, i in rows] or ["none"]
    if "only_harness" in report:
        for title, key in (("Killed only by the harness", "only_harness"),
                           ("Killed only by upstream", "only_upstream")):
            out += ["", f"## {title}", ""]
            out += [f"- {i} `{by_id[i]['diff']}`" for i in report[key]] or ["none"]
    out += ["", "## Argued equivalent", ""]
    out += [f"- {r['id']} `{r['diff']}`: {r['equivalent']}" for r in report["results"]
            if r["equivalent"] is not None] or ["none"]
    out += ["", "## Formerly argued equivalent (counted)", ""]
    out += [f"- {r['id']} `{r['diff']}`: {r['formerly_equivalent']}" for r in report["results"]
            if r["formerly_equivalent"] is not None] or ["none"]
    if report["stale_equivalents"]:
        out += ["", "Entries matching no mutant (stale): "
                + "; ".join(f"`{d}`" for d in report["stale_equivalents"])]
    out += ["", "## Every mutant", "",
            "| id | diff | " + " | ".join(f"{n} | s" for n in names) + " |",
            "|---|---|" + "---|---|" * len(names)]
    for r in report["results"]:
        cells = " | ".join(f"{_cell(r[n])} | {r[n]['seconds']}" for n in names)
        out.append(f"| {r['id']} | `{r['diff'].replace('|', '¦')}` | {cells} |")
    return "\n".join(out) + "\n"


def _why(result: dict) -> str:
    text = result.get("message") or ""
    test = result.get("test", "")
    return f" ({test}: {text[:MESSAGE_MAX]})" if text or test else ""


def _cell(result: dict) -> str:
    if result["outcome"] != "killed":
        return result["outcome"]
    test = result.get("test", "").rpartition("::")[2]
    return f"killed {result.get('property', '')} {test}".strip()


# -- the record (lch.records) -------------------------------------------------------------------

SUMMARY_KEYS = ("killed", "of", "score_percent", *COLUMNS, "not_run", "equivalent",
                "equivalents_run", "equivalents_killed", "any_failure", "any_failure_percent",
                "kills_by_property", "rule", "tests", "baseline_s")


def record(report: dict, command: str, vllm: dict | None, started: str) -> dict:
    """The campaign as a committed record: per suite the figures, per mutant its outcomes
    (the test and property of each kill; for anything else why), no logs."""
    name = f"{report['class'].rpartition(':')[2]}-{report['release']}"
    suites = {}
    for suite, s in report["suites"].items():
        suites[suite] = ({"could_not_run": s["could_not_run"], "tests": s["tests"]}
                         if "could_not_run" in s else {k: s[k] for k in SUMMARY_KEYS})
    summary = {"class": report["class"], "release": report["release"],
               "mutants": report["mutants"], "ran": report["ran"],
               "equivalent": report["equivalent"],
               "formerly_equivalent": report["formerly_equivalent"],
               "stale_equivalents": report["stale_equivalents"], "suites": suites}
    for key in ("only_harness", "only_upstream", "killed_by_either"):
        if key in report:
            summary[key] = report[key]
    names = list(scored(report))
    items = [{"id": r["id"], "method": r["method"], "line": r["line"],
              "operator": r["operator"], "diff": r["diff"],
              "equivalent": r["equivalent"], "formerly_equivalent": r["formerly_equivalent"],
              **{n: _item_outcome(r[n]) for n in names}} for r in report["results"]]
    return records.envelope("mutants", name, command, vllm=vllm, wall_s=report["wall_s"],
                            summary=summary, items=items, started=started)


def _item_outcome(result: dict) -> dict:
    kept = {"outcome": result["outcome"], "seconds": result.get("seconds", 0.0)}
    if result.get("test"):
        kept["test"] = result["test"]
    if result["outcome"] == "killed":
        kept["property"] = result.get("property")
    elif result.get("message"):                 # why it is not a kill
        kept["message"] = result["message"][:MESSAGE_MAX]
    if result.get("failures") and set(result["failures"]) != {result["outcome"]}:
        kept["failures"] = result["failures"]
    return kept
