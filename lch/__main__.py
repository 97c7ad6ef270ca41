"""``python -m lch hunt|replay|bisect ...``: the same as ``llm-cache-harness``."""

import sys

from lch.cli import main

sys.exit(main())
