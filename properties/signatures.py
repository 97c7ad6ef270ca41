"""A divergence's cause, as a signature: one bug, one finding, however a run laid it out.

A hunt meets one bug in many programs: a 3-call and a 5-call one, one request with two items
or two requests with one, prompt lengths 4 or 7. Keying a finding by its minimal program (the
rule before) gave one bug several ids (vLLM 0.14.0's pinned key evicted: seven ids) and gave
no way to tell, live, that a failing check is one the hunt already has. A signature keys it by
what is wrong instead:

- the **property** that failed (``slots-agree``);
- the **call** whose answer differs, where the check compares a call's answer: its message
  names it (``can_allocate returned True, the model expects False``). A check of the state
  after a step names the quantity it reads instead (``num_freeable_slots``), not the step:
  the same wrong state surfaces after whichever call next exposes it (ARC's inverted REPLACE
  after a ``touch`` in one program, after a ``complete_store`` in another: with the step in
  the signature, one bug was two findings);
- the **shape of the difference**, with numbers and numbered ids abstracted: for two values
  compared (``A != B``, ``returned A, the model expects B``) the fields where they differ and
  how (``num_freeable_slots: more``, ``output.scheduled_encoder_inputs: missing``); for a
  message that states a fact (``['img1'] reported freed but resident``) its text with every
  number ``N``, every id ``imgN`` and every collection ``[...]`` (so ``[1, 0, 3]`` and ``[2]``
  read alike);
- for a crash (property ``no-raise``) the exception's type and the function that raised it
  (file and function, not the line: a line moves between releases).

What stays apart is what a second bug changes: the property, the call, the field that
differs or the direction it differs in. Two bugs with all four alike share a group (a
limit, said in ``docs/history.md``); the group then lists their examples, each with its
program, and its smallest reproducer shows one of them.
"""

from __future__ import annotations

import ast
import hashlib
import re

from sim.outcomes import NO_RAISE, where_arose

_NUMBER = re.compile(r"-?\d+(\.\d+)?")
_ID = re.compile(r"(?<![\w.])([A-Za-z]+)\d+\b")
# A value compared with another: "A != B", "X returned A, the model expects B".
_COMPARED = (
    # A scan's result; the keys it looked up and what each answered are the program's layout
    # (a scan-agrees of vLLM 0.26.0's sticky defer split into ten groups by them).
    re.compile(r"^(?P<a>.+?) returned (?P<b>\S+) after looking up .*, expected (?P<c>\S+)$"),
    re.compile(r"^(?P<a>.+?) returned (?P<b>.+), the model expects (?P<c>.+)$"),
             re.compile(r"^(?P<b>.+?) != (?:FCFS prediction |expected )?(?P<c>.+)$"),
             re.compile(r"^(?P<b>.+?), expected (?P<c>.+)$"))
# ``sim.outcomes.message_of``'s crash: "<who> raised <Type>: <text> (at <file>:<line> in <fn>)".
_RAISED = re.compile(r"raised (?P<type>\w+):.*\(at (?P<file>[^()\s]+):\d+ in "
                     r"(?P<function>[^()\s]+)\)\s*$")
_CALL = re.compile(r"\s*(?:assert\s+)?[A-Za-z_]\w*\.(\w+)\(")
_VALUE_START = re.compile(r"[\[\({'\"]|(?<!\w)-?\d|\b[A-Z]\w*\(|\b(?:True|False|None)\b")


def abstract(text: str) -> str:
    """Numbers -> ``N``, numbered ids -> ``<prefix>N``, non-empty collections -> ``[...]``
    (``()``, ``{...}``): the text's shape, not its values."""
    text = _ID.sub(lambda m: f"{m.group(1)}N", text)
    text = _NUMBER.sub("N", text)
    previous = None
    while previous != text:       # innermost collections first
        previous = text
        text = re.sub(r"\[[^\[\]()]+\]", "[...]", text)
        text = re.sub(r"\{[^{}()\[\]]+\}", "{...}", text)
        text = re.sub(r"\((?:N|'[^']*'|\[\.\.\.\]|\{\.\.\.\}|, )+,?\)", "(...)", text)
    return text


def difference_shape(message: str) -> str:
    """The shape of a failed check's message (the property's name already stripped)."""
    first = message.splitlines()[0] if message else ""
    for pattern in _COMPARED:
        match = pattern.match(first)
        if match is None:
            continue
        left, right = match.group("b"), match.group("c")
        lead = match.group("a") + " returned" if "a" in pattern.groupindex else ""
        for start in (m.start() for m in _VALUE_START.finditer(left)):
            a = _parsed(left[start:])
            b = _parsed(right) or next(
                (v for cut in _cuts(right) if (v := _parsed(right[:cut])) is not None), None)
            if a is not None and b is not None:
                lead = f"{lead} {left[:start]}".strip()
                return f"{abstract(lead)} {{{compare(a, b)}}}".strip()
    return abstract(first)


def _parsed(text: str) -> ast.AST | None:
    """A printed value, or None: text that only parses as something else (``[2, 3] (answers
    ...)`` reads as calling a list) is no value."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    if any(not isinstance(c.func, (ast.Name, ast.Attribute)) for c in calls):
        return None
    return tree


def _cuts(text: str) -> list[int]:
    """Where a trailing explanation may start (``B: why``, ``B (why)``), nearest first."""
    return [m.start() for m in re.finditer(r": | \(", text)]


def compare(a: ast.AST, b: ast.AST) -> str:
    """Where two parsed values differ and how: ``field: more``, ``[key].field: missing``."""
    found: list[str] = []
    _diff(a, b, "", found)
    return ", ".join(sorted(set(found))) or "equal as printed"


def _diff(a: ast.AST, b: ast.AST, path: str, out: list[str]) -> None:
    here = path or "value"
    if isinstance(a, ast.Call) and isinstance(b, ast.Call) and \
            ast.unparse(a.func) == ast.unparse(b.func):
        for n, (x, y) in enumerate(zip(a.args, b.args, strict=False)):
            _diff(x, y, f"{path}[{n}]", out)
        kw_a = {k.arg: k.value for k in a.keywords}
        kw_b = {k.arg: k.value for k in b.keywords}
        for name in sorted(set(kw_a) | set(kw_b)):
            if name not in kw_a or name not in kw_b:
                out.append(f"{path}.{name}: {'extra' if name in kw_a else 'missing'}")
            else:
                _diff(kw_a[name], kw_b[name], f"{path}.{name}".lstrip("."), out)
        return
    if isinstance(a, ast.Dict) and isinstance(b, ast.Dict):
        items_a = dict(zip(map(ast.unparse, a.keys), a.values, strict=False))
        items_b = dict(zip(map(ast.unparse, b.keys), b.values, strict=False))
        keys = set(items_a) ^ set(items_b)
        if set(items_a) - set(items_b):
            out.append(f"{here}: extra key")
        if set(items_b) - set(items_a):
            out.append(f"{here}: missing key")
        for key in sorted(set(items_a) & set(items_b) - keys):
            _diff(items_a[key], items_b[key], f"{path}[{abstract(key)}]", out)
        return
    sequences = (ast.List, ast.Tuple, ast.Set)
    if isinstance(a, sequences) and isinstance(b, sequences):
        text_a, text_b = [ast.unparse(e) for e in a.elts], [ast.unparse(e) for e in b.elts]
        if sorted(text_a) == sorted(text_b) and text_a != text_b:
            out.append(f"{here}: order")
            return
        if isinstance(a, ast.Tuple) and isinstance(b, ast.Tuple) and \
                len(a.elts) == len(b.elts) and all(
                isinstance(e, sequences) for e in (*a.elts, *b.elts)):
            # One sequence per group (a hybrid pool's blocks): each compared with its own,
            # under the same path, so a bug shows one signature in a pool of one group or
            # several, whichever group it shows in. A group holding more blocks or fewer is
            # that alone: a window's hit of another length reads other blocks, which says
            # nothing more about the bug.
            for x, y in zip(a.elts, b.elts, strict=False):
                if len(x.elts) != len(y.elts):
                    out.append(f"{here}: {'extra' if len(x.elts) > len(y.elts) else 'missing'}")
                else:
                    _diff(x, y, path, out)
            return
        if isinstance(a, ast.Tuple) and len(a.elts) == len(b.elts) and all(
                _number(e) is not None for e in (*a.elts, *b.elts)):   # a record of counts
            for n, (x, y) in enumerate(zip(a.elts, b.elts, strict=False)):
                _diff(x, y, f"{path}[{n}]", out)
            return
        if set(text_a) - set(text_b):
            out.append(f"{here}: extra")
        if set(text_b) - set(text_a):
            out.append(f"{here}: missing")
        if set(text_a) == set(text_b) and text_a != text_b:
            out.append(f"{here}: {'order' if sorted(text_a) == sorted(text_b) else 'count'}")
        if len(text_a) == len(text_b) and set(text_a) != set(text_b) and \
                all(isinstance(e, ast.Call) for e in (*a.elts, *b.elts)):
            for x, y in zip(a.elts, b.elts, strict=False):
                _diff(x, y, f"{path}[]", out)
        return
    x, y = _number(a), _number(b)
    if x is not None and y is not None:
        if x != y:
            out.append(f"{here}: {'more' if x > y else 'less'}")
        return
    if ast.unparse(a) != ast.unparse(b):
        out.append(f"{here}: {abstract(ast.unparse(a))} vs {abstract(ast.unparse(b))}")


def _number(node: ast.AST) -> float | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    return None


def method_of(step) -> str:
    """``cache.allocate(r0, 0)`` -> ``allocate``: the API method a step calls (the machine's
    action name where the call is not a method call)."""
    match = _CALL.match(step.call)
    return match.group(1) if match else str(step.action[:1])


def signature_text(property: str, message: str, error: BaseException | None = None) -> str:
    """``property | shape`` (a crash: ``no-raise | ExceptionType at file in function``)."""
    detail = message.split(": ", 1)[1] if message.startswith(f"{property}: ") else message
    if property == NO_RAISE and error is not None:
        _, where = where_arose(error)
        return f"{property} | {type(error).__name__} at {re.sub(r':[0-9]+ in ', ' in ', where)}"
    # A crash known by its message only (a suite's failure, read back from its report):
    # the same text as from the error, which ``message_of`` spelled out (one bug, one
    # signature, whether a hunt or a suite met it).
    crash = _RAISED.search(detail) if property == NO_RAISE else None
    if crash is not None:
        return f"{property} | {crash['type']} at {crash['file']} in {crash['function']}"
    return f"{property} | {difference_shape(detail)}"


def split_shape(text: str) -> tuple[str, str] | None:
    """A signature ``property | lead {difference}`` as (lead, difference): the call or
    quantity named ("" where none is) and the shape of two values compared; None for a
    signature that compares no values (a fact's text, a crash)."""
    match = re.match(r"^[^|]+\| (.*?) ?(\{[^{}]*\})$", text)
    return (match.group(1), match.group(2)) if match else None


def signature_id(subsystem: str, property: str, text: str) -> str:
    """The group's id: ``<subsystem>/<property>/<hash of the signature>``."""
    return f"{subsystem}/{property}/{hashlib.sha256(text.encode()).hexdigest()[:8]}"
