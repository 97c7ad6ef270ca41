"""The generated blocks of the README and ``docs/``: each a function of the committed records
(``results/``), registered by name with ``lch.records.renderer``. A block shows figures and
names the records they come from, so a reader can open the data behind every number."""

from __future__ import annotations

from pathlib import Path

from lch.records import load, renderer

KINDS = ("mutants", "mutants/old-rule", "history", "bench", "hunt", "gpu")


@renderer("records-index")
def records_index(results: Path) -> str:
    """Every committed record: what it measured, where, when and how long."""
    rows = ["| record | harness commit | vLLM | machine | finished | wall |",
            "|---|---|---|---|---|---|"]
    for kind in KINDS:
        for r in load(kind, results):
            vllm = (r.get("vllm") or {}).get("version", "-")
            m = r["machine"]
            commit = (r["harness"]["commit"] or "?")[:10] + (" (dirty)" if r["harness"]["dirty"]
                                                             else "")
            rows.append(f"| `results/{kind}/{r['name']}.json` | `{commit}` | {vllm} | "
                        f"{m['cores']} cores, Python {m['python']}, torch {m['torch']} | "
                        f"{r['finished'][:10]} | {r['wall_s']} s |")
    if len(rows) == 2:
        rows.append("| (none yet) | | | | | |")
    return "\n".join(rows)


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
