"""KV values of the offload engine: one integer per write, decodable back to its origin.

The value of K (and V) at position ``pos`` of ``layer`` for sequence ``uid`` in its ``write``-th
prefill incarnation (0 the first time, +1 after every preempt) is unique per write, so a stale
copy is caught even where its data would be identical. 0 is never a value: it is a zero
(uninitialised or zeroed) row. Values stay below 2**53, exact in float64 as well as int64.
"""

from __future__ import annotations

POS_SPAN, LAYER_SPAN, WRITE_SPAN = 100, 10, 100


def kv_value(uid: int, write: int, layer: int, pos: int) -> int:
    assert 0 <= pos < POS_SPAN and 0 <= layer < LAYER_SPAN and 0 <= write < WRITE_SPAN, \
        (uid, write, layer, pos)
    return 1 + pos + POS_SPAN * (layer + LAYER_SPAN * (write + WRITE_SPAN * uid))


def kv_origin(value: int) -> str:
    """``"s<uid>/w<write> layer <l> pos <p>"`` for a value, ``"zero row"`` for 0."""
    if value <= 0:
        return "zero row" if value == 0 else f"garbage {value}"
    rest, pos = divmod(value - 1, POS_SPAN)
    rest, layer = divmod(rest, LAYER_SPAN)
    uid, write = divmod(rest, WRITE_SPAN)
    return f"s{uid}/w{write} layer {layer} pos {pos}"
