"""Before / after: the same hunt (seed, examples, release) run by an older harness checkout and
by this one, per subsystem; how many findings each reported and which known upstream bugs
(``fixtures/upstream_bugs.py``) their findings are. Writes a result record
(``results/hunt/before-after-<release>.json``).

    python tools/hunt_before_after.py --before /tmp/base --release 0.14.0 \
        --python /work/venvs/vllm-0.14.0/bin/python \
        --subsystem encoder_cache --subsystem tiered_lookup --examples 300

``--before`` is an exported tree of the older commit (``git archive <commit> | tar -x -C DIR``);
both run with ``PYTHONPATH`` at their own tree, in the release's venv, under the hunt profile.
An old report has no signatures: its findings are matched to known bugs by the signature this
checkout computes from their property and message.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fixtures.upstream_bugs import recall  # noqa: E402
from lch import records  # noqa: E402
from properties.signatures import signature_text  # noqa: E402


def hunt(tree: Path, python: str, subsystem: str, examples: int, out: Path) -> tuple[dict, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "HYPOTHESIS_PROFILE": "hunt",
           "VLLM_TARGET_DEVICE": "cpu"}
    began = time.monotonic()
    subprocess.run([python, "-m", "lch.cli", "hunt", "--target", "vllm", "--subsystem",
                    subsystem, "--seed", "0", "--examples", str(examples), "--no-db",
                    "--report-dir", str(out), "--reproducer-dir", str(out)],
                   cwd=tree, env=env, capture_output=True, text=True, check=False)
    return json.loads((out / "hunt-report.json").read_text())["pairs"][0], \
        time.monotonic() - began


def groups(pair: dict) -> list[dict]:
    return [{"id": f["id"], "property": f["property"], "calls": f["calls"],
             "signature": f.get("signature") or signature_text(f["property"], f["message"])}
            for f in pair.get("findings") or []]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--release", required=True)
    parser.add_argument("--subsystem", action="append", required=True)
    parser.add_argument("--examples", type=int, default=300)
    args = parser.parse_args()
    items, began = [], time.monotonic()
    for subsystem in args.subsystem:
        for side, tree in (("before", Path(args.before)), ("after", ROOT)):
            with tempfile.TemporaryDirectory() as out:
                pair, seconds = hunt(tree, args.python, subsystem, args.examples, Path(out))
            found = groups(pair)
            known = [k for k in recall(args.release, {subsystem: found})
                     if k["column"] == subsystem]
            items.append({"side": side, "subsystem": subsystem, "findings": len(found),
                          "groups": found, "examples": pair["examples"],
                          "seconds": round(seconds, 1),
                          "known_found": [k["bug"] for k in known if k["found"]],
                          "known_missed": [k["bug"] for k in known if k["found"] is False]})
            print(side, subsystem, len(found), items[-1]["known_found"], flush=True)
    command = "python tools/hunt_before_after.py " + " ".join(sys.argv[1:])
    record = records.envelope("hunt", f"before-after-{args.release}", command,
                              vllm={"version": args.release}, wall_s=time.monotonic() - began,
                              summary={"release": args.release, "examples": args.examples},
                              items=items)
    print(records.write(record, ROOT / "results"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
