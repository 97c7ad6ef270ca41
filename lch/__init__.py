"""Entry points that drive the machines: the top layer of the harness.

``lch/`` depends on ``properties``, ``sim``, ``models`` and ``fixtures``; nothing depends on
it. ``mutants`` measures how many mutants of a real vLLM class the vllm suites kill
(``nox -s mutants``); ``mutate`` makes those mutants.
"""
