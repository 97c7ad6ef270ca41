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


@renderer("mamba-mtp")
def mamba_mtp(results: Path) -> str:
    """The Mamba + MTP stall in the world vLLM builds (``python -m lch.mamba_mtp``): the
    world's settings as vLLM set them, then every case and where it stopped."""
    found = [r for r in load("findings", results) if r["name"] == "mamba-mtp"]
    if not found:
        return "(no record yet: run `python -m lch.mamba_mtp --record-dir results`)"
    r = found[0]
    w, m = r["summary"]["world"], r["machine"]
    spec = w["mamba_spec"]
    lines = [
        f"Record `results/findings/mamba-mtp.json`: vLLM {r['vllm']['version']}, harness "
        f"`{(r['harness']['commit'] or '?')[:10]}`, {m['cores']} cores (load "
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
    return "\n".join(lines)
