"""Architecture and determinism rules a grep can check (run by ``nox -s lint``).

1. ``models/`` imports neither torch nor vllm.
2. No global randomness or wall clock in models/, sim/, properties/: Hypothesis owns the
   randomness and the test owns time. Code that must draw owns a ``random.Random(seed)``.
3. No committed Hypothesis reproduce-failure blobs (they are bound to one Hypothesis version).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RULES = [
    ("models", re.compile(r"^\s*(import|from)\s+(torch|vllm)\b"),
     "models/ must not import torch or vllm"),
    ("models sim properties",
     re.compile(r"(^|[^.\w])(random\.(random|randint|randrange|choice|shuffle|seed|uniform)\(|"
                r"time\.time\(|os\.urandom\(|torch\.manual_seed\(|torch\.rand\w*\()"),
     "global randomness or wall clock breaks determinism"),
    ("models sim properties fixtures", re.compile("@" + "reproduce_failure"),
     "emit a reproducer file instead of committing a reproduce-failure blob"),
]


def main() -> int:
    problems = []
    for folders, pattern, why in RULES:
        for folder in folders.split():
            for path in sorted((ROOT / folder).rglob("*.py")):
                for number, line in enumerate(path.read_text().splitlines(), 1):
                    if pattern.search(line):
                        problems.append(f"{path.relative_to(ROOT)}:{number}: {why}: {line}")
    print("\n".join(problems) or "rules: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
