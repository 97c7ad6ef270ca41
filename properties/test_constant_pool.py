"""The pinned constant pool (``fixtures/constant_pool.py``): a derandomized search draws the
same values whatever local modules are loaded, and without the pin it would not."""

from __future__ import annotations

import importlib
import sys
from contextlib import contextmanager

from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import providers

from fixtures import constant_pool

TOP = 2**20


def literal(i: int) -> int:
    return TOP // 2 + 7919 * i


def _draws() -> list[int]:
    drawn: list[int] = []

    @settings(derandomize=True, database=None, max_examples=300, phases=[Phase.generate],
              deadline=None)
    @given(st.integers(0, TOP))
    def draw(n):
        drawn.append(n)

    draw()
    return drawn


@contextmanager
def _module_of_literals(tmp_path, name: str):
    # 400 distinct literals inside the drawn range: a pool that took them in would hand
    # some of them out within 300 examples (one draw in 40 or so is a local constant). The
    # module stays loaded while the draws run: Hypothesis looks for new modules then.
    body = "\n".join(f"V{i} = {literal(i)}" for i in range(400))
    (tmp_path / f"{name}.py").write_text(body + "\n")
    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module(name)
        yield
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def test_pinned_pool_keeps_derandomized_draws(tmp_path):
    assert constant_pool.pin(), "Hypothesis has no constant pool to pin: update the pin"
    before = _draws()
    with _module_of_literals(tmp_path, "lch_pool_literals_pinned"):
        assert _draws() == before


def test_unpinned_pool_moves_derandomized_draws(tmp_path, monkeypatch):
    # The witness: with Hypothesis's own gatherer back, the same module moves the draws.
    constant_pool.pin()
    monkeypatch.setattr(providers, "_get_local_constants",
                        providers._get_local_constants.unpinned)
    providers.CONSTANTS_CACHE.cache.clear()
    before = _draws()
    with _module_of_literals(tmp_path, "lch_pool_literals_unpinned"):
        after = _draws()
    providers.CONSTANTS_CACHE.cache.clear()
    assert set(after) - set(before) & {literal(i) for i in range(400)}
