"""The prefix cache's bug switches (``sim/native/prefix_cache.py`` reads them; the catalogue,
``fixtures/prefix_cache_bugs.py``, says where each comes from and what must catch it)."""

PREFIX_CACHE_BUGS = (
    "pc-evict-keeps-hash", "pc-hit-last-token", "pc-free-head-first", "pc-touch-keeps-queued",
    "pc-revived-uncounted", "pc-removed-not-reported", "pc-reset-counts-null",
    "pc-eagle-keeps-last",
)
