"""Where an error arose decides what it means: ``divergence``, or ``unavailable``.

A state machine's run ends in one of three outcomes, never confused:

- ``pass``: every property held.
- ``divergence``: a property failed against the model. That is an ``AssertionError`` raised by
  the harness's own checks (``properties/``), whose message starts with the property's name;
  or the implementation under test raising on a call the model accepts (its own assertion,
  a ``KeyError`` in its bookkeeping): a crash is a finding too, under the property
  ``no-raise``.
- ``unavailable``: the target could not be driven. The adapter (``sim/vllm/``) raised, or
  vLLM's code raised ``TypeError`` / ``AttributeError`` / ``NameError`` / ``ImportError``
  (the signs of a call shaped for another release: a missing keyword, a renamed field) on a
  line the release ships, unless no caller could have caused it (``_own_fault``), or the
  harness itself failed outside a property check. The report names the call and error.

``classify`` reads the traceback: the innermost frame of vLLM or of this repository is where
the error arose. A frame belongs to what its *module* is, not to where its file resolves:
``vllm.*`` is vLLM whether it was loaded from a wheel, an editable checkout or the overlay
of ``--vllm-path`` (whose symlinks resolve into the user's checkout, or into a virtualenv
that may sit inside this repository, as nox's ``.nox/`` does); ``sim.vllm.*`` is the
adapter, ``sim.native.*`` the native target (an implementation under test: its crash is a
finding). A file with no such module name (a reproducer pytest imported by its base name)
is placed by its path, and nothing inside a virtualenv is the harness.

Under ``--vllm-path`` the shape rule has one exception: an error raised while any of vLLM's
frames stands on a line the checkout changed from the release is the checkout's, whatever
its type (``changed_lines``), so a pull request that makes vLLM raise is a finding.
"""

from __future__ import annotations

import difflib
import dis
import functools
import os
import re
from pathlib import Path
from types import TracebackType

from attrs import frozen

ROOT = Path(__file__).resolve().parents[1]
HARNESS_PACKAGES = ("sim", "lch", "properties", "fixtures", "models")
# Raised inside vLLM's own code, these mean "called with the wrong shape for this release"
# (but see ``_own_fault``: some of them no caller can cause).
SHAPE_ERRORS = (TypeError, AttributeError, NameError, ImportError)
# Set by ``lch.mutants`` in the child that runs one mutant (its id). A campaign's unmutated
# run passed with the same calls on the same release, so no call of the harness is shaped for
# another release there: a shape error inside vLLM is the mutant's, like any other raise.
MUTANT_ENV = "LCH_MUTANT"
# The property a target breaks when it raises on a call the model accepts.
NO_RAISE = "no-raise"
VENV_PARTS = ("site-packages", "dist-packages")


@frozen
class Verdict:
    kind: str            # "divergence" | "unavailable"
    where: str           # "file:line in function" of the innermost frame
    detail: str          # "TypeError: ..." (the error in one line)
    why: str = ""        # how the kind was decided, where it is not the plain rule


@frozen
class Frame:
    area: str            # adapter | properties | native | harness | vllm | other
    where: str           # "file:line in function"
    path: Path
    line: int


def _frames(error: BaseException) -> list[Frame]:
    """The traceback's frames, outermost first, each placed in its area."""
    frames = []
    tb: TracebackType | None = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        module = tb.tb_frame.f_globals.get("__name__") or ""
        path = Path(code.co_filename)
        area, short = _place(module, path)
        frames.append(Frame(area, f"{short}:{tb.tb_lineno} in {code.co_name}", path,
                            tb.tb_lineno))
        tb = tb.tb_next
    return frames


def _place(module: str, path: Path) -> tuple[str, str]:
    """(area, a short name for the file) from the module's name, else from its path."""
    top = module.split(".", 1)[0]
    if top == "vllm":
        return "vllm", _module_file(module, path)
    if top in HARNESS_PACKAGES:
        return _area_of(module.replace(".", "/") + "/"), _repo_file(path, module)
    parts = path.parts
    for marker in VENV_PARTS:        # a library, or vLLM compiled under a venv's file name
        if marker in parts:
            below = parts[parts.index(marker) + 1:]
            return ("vllm" if below[:1] == ("vllm",) else "other"), "/".join(below)
    try:
        rel = path.resolve().relative_to(ROOT).as_posix()
    except (ValueError, OSError):
        return "other", str(path)
    if any(part.startswith(".") for part in Path(rel).parts[:-1]):   # .nox/, .venv/
        return "other", rel
    return _area_of(rel), rel


def _area_of(rel: str) -> str:
    if rel.startswith("sim/vllm/"):
        return "adapter"
    if rel.startswith("sim/native/"):
        return "native"
    if rel.startswith("properties/"):
        return "properties"
    return "harness"


def _module_file(module: str, path: Path) -> str:
    stem = module.replace(".", "/")
    return f"{stem}/__init__.py" if path.name == "__init__.py" else f"{stem}.py"


def _repo_file(path: Path, module: str) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except (ValueError, OSError):
        return _module_file(module, path)


def where_arose(error: BaseException) -> tuple[str, str]:
    """(the area the innermost traceback frame belongs to, "file:line in function").
    Areas: ``adapter`` (sim/vllm), ``properties``, ``native`` (sim/native), ``harness`` (the
    rest of this repository), ``vllm`` (vLLM's package, from wherever it was loaded),
    ``other``. Frames of the standard library, numpy or torch below the innermost frame of
    this repository or of vLLM belong to whoever called them."""
    for frame in reversed(_frames(error)):
        if frame.area != "other":
            return frame.area, frame.where
    return "other", "?"


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


PROPERTY_PREFIX = re.compile(r"^\s*([a-z][a-z0-9]*(?:-[a-z0-9]+)*):")


def property_of(error: BaseException) -> str:
    """The property a failure breaks: the declared one (``PropertyFailed.property``), else
    one a harness assertion's message names (``<property>: <detail>``; a bare ``assert`` of
    a test is ``AssertionError``), else ``no-raise``: the target raised on a call the model
    accepts (its type is in the message)."""
    declared = getattr(error, "property", None)
    if declared:
        return declared
    if isinstance(error, AssertionError) and where_arose(error)[0] in ("properties",
                                                                        "harness"):
        match = PROPERTY_PREFIX.match(str(error))   # a test's own assert names none
        return match.group(1) if match else type(error).__name__
    return NO_RAISE


def message_of(error: BaseException) -> str:
    """A failure's message: a property's own text, or for a raise, what raised where."""
    if property_of(error) != NO_RAISE:
        return str(error).strip()
    area, where = where_arose(error)
    who = {"vllm": "vLLM", "native": "the native target"}.get(area, "the target")
    return f"{NO_RAISE}: {who} raised {one_line(error)} (at {where})"


OUTSIDE = "outside what vLLM builds"


def outside_label(reasons: list[str] | tuple[str, ...]) -> str:
    """What a failure in a world vLLM's config objects do not build carries (the vllm
    target's reasons, ``sim/vllm/scheduler_world.py``), or "" for a world they build. Such a
    failure is still a divergence between the model and vLLM's classes, never a finding
    against vLLM."""
    return f"{OUTSIDE}: {'; '.join(reasons)}" if reasons else ""


def same_failure(error: BaseException, other: BaseException) -> bool:
    """Whether a replay failed as the original did: the same property, and for a raise the
    same exception type (a shrunk program that raises something else is another bug)."""
    prop = property_of(error)
    if prop != property_of(other):
        return False
    return prop != NO_RAISE or type(error) is type(other)


def classify(error: BaseException) -> Verdict:
    frames = _frames(error)
    area, where = where_arose(error)
    detail = one_line(error)
    if area == "adapter":
        return Verdict("unavailable", where, detail)
    if area == "vllm":
        changed = _in_changed_line(frames)
        if changed:
            return Verdict("divergence", where, detail,
                           f"raised while vLLM ran {changed}, a line your checkout changed")
        own = _own_fault(error)
        if own:
            return Verdict("divergence", where, detail, own)
        mutant = os.environ.get(MUTANT_ENV)
        if mutant and not isinstance(error, ImportError):
            # Whatever the type: the unmutated class was built and ran these calls in this
            # campaign, so neither a shape error nor a constructor's own check (an assertion
            # on the arguments, which ``targets.make`` would otherwise take for a world the
            # release rejects) can be the harness's.
            return Verdict("divergence", where, detail,
                           f"mutant {mutant} changed only method bodies, and the unmutated "
                           "class was built and ran these calls in this campaign: the raise "
                           "is the mutant's")
        kind = "unavailable" if isinstance(error, SHAPE_ERRORS) else "divergence"
        return Verdict(kind, where, detail)
    if area in ("properties", "harness") and not isinstance(error, AssertionError):
        return Verdict("unavailable", where, detail)
    return Verdict("divergence", where, detail)


def _own_fault(error: BaseException) -> str | None:
    """Why a shape error raised in vLLM's innermost frame is vLLM's own fault, whatever the
    caller passed: a name its own code never bound (NameError, UnboundLocalError: no argument
    reaches a function's names), or an attribute missing from the very object whose method
    raised (``self``: the class did not keep what its own methods read). None otherwise: a
    TypeError or an AttributeError on an argument may be a call shaped for another release."""
    tb = error.__traceback__
    innermost, lasti = None, -1
    while tb is not None:
        innermost, lasti, tb = tb.tb_frame, tb.tb_lasti, tb.tb_next
    if innermost is None or _place(innermost.f_globals.get("__name__") or "",
                                   Path(innermost.f_code.co_filename))[0] != "vllm":
        return None
    if isinstance(error, NameError) and not isinstance(error, ImportError):
        return "a name vLLM's own code never bound"
    if isinstance(error, AttributeError) and "self" in innermost.f_locals \
            and getattr(error, "obj", None) is innermost.f_locals["self"]:
        return "an attribute its own object lacks"
    if isinstance(error, AttributeError) and getattr(error, "obj", 0) is None:
        source = _none_source(innermost.f_code, lasti)
        if source:
            return f"an attribute read on None that vLLM's own code produced ({source})"
    return None


def _none_source(code, lasti: int) -> str | None:
    """Where the None whose attribute vLLM read came from, when no caller could have put it
    there: a local the function bound itself (not a parameter), or a field of its own
    ``self``. None otherwise (a parameter, or a field of one, is the caller's to shape).
    Read from the bytecode at the failing instruction: the traceback says which object was
    None only as a type, and this is the one place that says which expression produced it."""
    ops = list(dis.get_instructions(code))
    at = next((i for i, op in enumerate(ops) if op.offset == lasti), None)
    if at is None or at < 1 or ops[at].opname not in ("LOAD_ATTR", "LOAD_METHOD"):
        return None
    before = ops[at - 1]
    parameters = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    if before.opname.startswith("LOAD_FAST") and before.argval not in parameters:
        return f"the local {before.argval!r}"
    if before.opname in ("LOAD_ATTR", "LOAD_METHOD") and at >= 2 \
            and ops[at - 2].opname.startswith("LOAD_FAST") and ops[at - 2].argval == "self":
        return f"its own field {before.argval!r}"
    return None


# -- a checkout's own lines (--vllm-path) -----------------------------------------------------

def _in_changed_line(frames: list[Frame]) -> str | None:
    """The first vLLM frame (innermost first) standing on a line the checkout under test
    changed from the installed release, as "file:line in function"; None without one."""
    checkout = os.environ.get("LCH_VLLM_PATH")
    if not checkout:
        return None
    for frame in reversed(frames):
        if frame.area != "vllm":
            continue
        release = _release_file(frame.path, Path(checkout))
        if release is not None and frame.line in changed_lines(str(frame.path.resolve()),
                                                               str(release)):
            return frame.where
    return None


def _release_file(path: Path, checkout: Path) -> Path | None:
    """The release's copy of a vLLM file the checkout provides (None: not the checkout's)."""
    try:
        real = path.resolve()
        rel = real.relative_to(checkout.resolve())
    except (ValueError, OSError):
        return None
    from sim.vllm.overlay import release_package
    package = release_package()
    if package is None or rel.parts[:1] != ("vllm",):
        return None
    return package.parent / rel


@functools.lru_cache(maxsize=256)
def changed_lines(checkout_file: str, release_file: str) -> frozenset[int]:
    """Line numbers (1-based) of ``checkout_file`` that the release's copy does not have:
    added or replaced lines. A file the release lacks is all new."""
    try:
        mine = Path(checkout_file).read_text().splitlines()
    except OSError:
        return frozenset()
    try:
        theirs = Path(release_file).read_text().splitlines()
    except OSError:
        return frozenset(range(1, len(mine) + 1))
    matcher = difflib.SequenceMatcher(None, theirs, mine, autojunk=False)
    return frozenset(n + 1 for tag, _, _, j1, j2 in matcher.get_opcodes()
                     if tag in ("replace", "insert") for n in range(j1, j2))
