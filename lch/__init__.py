"""The top layer: entry points that drive the state machines (hunt, replay, bisect, bench).

Nothing below imports ``lch``: ``properties`` (machines) -> ``fixtures`` -> ``sim`` (targets)
-> ``models``, each layer importing only the ones under it (``nox -s lint`` checks it).
"""
