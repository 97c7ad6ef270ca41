"""Where an error arose decides what it means: ``divergence``, or ``unavailable``.

A state machine's run ends in one of three outcomes, never confused (DESIGN.md section 3):

- ``pass``: every property held.
- ``divergence``: a property failed against the model. That is an ``AssertionError`` raised by
  the harness's own checks (``properties/``), whose message starts with the property's name;
  or the implementation under test raising on a call the model accepts (its own assertion,
  a ``KeyError`` in its bookkeeping): a crash is a finding too.
- ``unavailable``: the target could not be driven. The adapter (``sim/vllm/``) raised, or
  vLLM's code raised ``TypeError`` / ``AttributeError`` / ``NameError`` / ``ImportError``
  (the signs of a call shaped for another release: a missing keyword, a renamed field), or
  the harness itself failed outside a property check. The report names the call and error.

``classify`` reads the traceback: the innermost frame is where the error arose. Only the
``vllm`` target's adapter errors are reclassified; a crash inside ``sim/native/`` stays a
finding (the native target is an implementation under test).
"""

from __future__ import annotations

import re
import traceback
from pathlib import Path

from attrs import frozen

ROOT = Path(__file__).resolve().parents[1]
ADAPTER = "sim/vllm/"
# Raised inside vLLM's own code, these mean "called with the wrong shape for this release".
SHAPE_ERRORS = (TypeError, AttributeError, NameError, ImportError)


@frozen
class Verdict:
    kind: str            # "divergence" | "unavailable"
    where: str           # "file:line in function" of the innermost frame
    detail: str          # "TypeError: ..." (the error in one line)


def where_arose(error: BaseException) -> tuple[str, str]:
    """(the area the innermost traceback frame belongs to, "file:line in function").
    Areas: ``adapter`` (sim/vllm), ``properties``, ``native`` (sim/native), ``harness`` (the
    rest of this repository), ``vllm`` (the installed vLLM), ``other``."""
    # The innermost frame of this repository or of vLLM: frames of the standard library,
    # numpy or torch below it belong to whoever called them.
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        area = _area(Path(frame.filename))
        if area != "other":
            return area, f"{_short(Path(frame.filename))}:{frame.lineno} in {frame.name}"
    return "other", "?"


def _area(path: Path) -> str:
    parts = path.parts
    if "site-packages" in parts:        # a venv may live inside the checkout (.nox/)
        return "vllm" if parts[parts.index("site-packages") + 1:][:1] == ("vllm",) else "other"
    try:
        rel = path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return "other"
    if rel.startswith(ADAPTER):
        return "adapter"
    if rel.startswith("sim/native/"):
        return "native"
    if rel.startswith("properties/"):
        return "properties"
    return "harness"


def _short(path: Path) -> str:
    parts = path.parts
    if "site-packages" in parts:
        return "/".join(parts[parts.index("site-packages") + 1:])
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


PROPERTY_PREFIX = re.compile(r"^\s*([a-z][a-z0-9]*(?:-[a-z0-9]+)*):")


def property_of(error: BaseException) -> str:
    """The property a failure breaks: the declared one (``PropertyFailed.property``), else
    one an assertion message names (``<property>: <detail>``), else the exception's type (a
    target that raises, e.g. ``EncoderCacheMiss``, breaks no declared property but fails)."""
    declared = getattr(error, "property", None)
    if declared:
        return declared
    match = PROPERTY_PREFIX.match(str(error)) if isinstance(error, AssertionError) else None
    return match.group(1) if match else type(error).__name__


def classify(error: BaseException) -> Verdict:
    area, where = where_arose(error)
    detail = one_line(error)
    if area == "adapter":
        return Verdict("unavailable", where, detail)
    if area == "vllm":
        kind = "unavailable" if isinstance(error, SHAPE_ERRORS) else "divergence"
        return Verdict(kind, where, detail)
    if area in ("properties", "harness") and not isinstance(error, AssertionError):
        return Verdict("unavailable", where, detail)
    return Verdict("divergence", where, detail)
