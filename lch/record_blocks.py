"""The generated blocks of the README and ``docs/``: each a function of the committed records
(``results/``), registered by name with ``lch.records.renderer``. A block shows figures and
names the records they come from, so a reader can open the data behind every number."""

from __future__ import annotations

from pathlib import Path

from lch.records import load, renderer

KINDS = ("mutants", "history", "bench", "hunt", "gpu", "witnesses")


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
        f"{m['cores']} cores, load average {m['load_avg']} (shared), harness "
        f"`{(r['harness']['commit'] or '?')[:10]}`; record "
        f"`results/witnesses/property-witnesses.json`.")
