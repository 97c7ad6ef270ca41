"""The top layer: entry points that drive the state machines (hunt, replay, bisect, bench,
mutants).

Nothing below imports ``lch``: ``properties`` (machines) -> ``fixtures`` -> ``sim`` (targets)
-> ``models``, each layer importing only the ones under it (``nox -s lint`` checks it).
``mutants`` measures how many mutants of a real vLLM class the vllm suites kill
(``nox -s mutants``); ``mutate`` makes those mutants.
"""
