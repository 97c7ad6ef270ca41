"""Adapters to the installed vLLM's real classes (the ``vllm`` target).

The only code in the harness that knows vLLM internals and how they differ between releases:
``release.py`` imports vLLM (once per process, on CPU), checks the release and compares
releases; each subsystem's ``<s>_compat.py`` (``encoder_cache_compat.py``, ...) holds that
subsystem's API differences and the private fields its adapter reads, one small function each
tagged with the releases it applies to; ``encoder_cache.py`` drives the real
``EncoderCacheManager`` through the encoder-cache port. Nothing here is imported unless the
``vllm`` target is asked for.
"""
