"""Root conftest: load the harness plugin (options, profiles) for every test run.

Every harness module used to be imported here first, so that Hypothesis's pool of local
constants was the same in every process; the pool is now pinned empty instead
(``fixtures/constant_pool.py``, pinned by the profiles the plugin loads), and a test imports
only what it uses.
"""

from __future__ import annotations

# pytester: tests that run a small pytest file of their own (a reproducer's marks).
pytest_plugins = ["fixtures.pytest_plugin", "pytester"]
