"""Adapters to the installed vLLM's real classes (the ``vllm`` target).

The only code in the harness that knows vLLM internals and how they differ between releases:
``release.py`` imports vLLM (once per process, on CPU) and checks the release; ``compat.py``
holds each API difference behind one small function tagged with the releases it applies to;
``encoder_cache.py`` drives the real ``EncoderCacheManager`` through the encoder-cache port.
Nothing here is imported unless the ``vllm`` target is asked for.
"""
