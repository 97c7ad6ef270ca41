"""Upstream reproducers: a ``vllm`` target's failure as a test that needs only vLLM and pytest."""

from __future__ import annotations


def write_upstream_reproducer(machine, failure, directory):
    return None
