"""Reference models: plain-Python statements of what each cache subsystem must do.

Written from the behaviour each subsystem promises (``docs/specs/``), never from an
implementation. Each model stores the
facts (entries, holders, writes) and *computes* what implementations keep as running
totals, so a shared mistake is unlikely. Imports nothing but the standard library and
attrs: ``properties/test_models_pure.py`` imports every module with torch and vllm
blocked.
"""
