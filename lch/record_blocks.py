"""The generated blocks of the README and ``docs/``: each a function of the committed records
(``results/``), registered by name with ``lch.records.renderer``. A block shows figures and
names the records they come from, so a reader can open the data behind every number."""

from __future__ import annotations

from pathlib import Path

from lch.records import load, renderer

KINDS = ("mutants", "history", "bench", "hunt", "gpu")


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
