"""The bug switches of the native target: bug id -> the subsystem whose implementation
reads it. ``native:<bug-id>`` turns exactly one on. The catalogue in
``fixtures/known_bugs.py`` adds the source, the property that must catch it and the bound on
its minimal reproducer; a test keeps the two lists equal."""

BUG_SWITCHES: dict[str, str] = {
    "enc-stale-freed": "encoder_cache",
    "enc-repeat-item": "encoder_cache",
    "offload-id-reuse": "offload_engine",
    "offload-partial-block": "offload_engine",
    "offload-dropped-decode": "offload_engine",
    "offload-layer-alias": "offload_engine",
}
