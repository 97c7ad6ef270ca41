"""Mutants of one class's methods, made with ``ast``, and applied in memory to the live class.

Operators (the classic small set, each a one-token change a reviewer could miss):

- ``cmp``: a comparison swapped (``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``in``/``not in``,
  ``is``/``is not``);
- ``arith``: ``+``/``-`` swapped, in expressions and augmented assignments;
- ``not``: a ``not`` dropped;
- ``bool``: ``True``/``False`` flipped;
- ``int``: an integer constant plus one;
- ``delete``: a statement replaced by ``pass`` (docstrings and ``pass`` itself excepted).

Only the bodies of the class's own methods are mutated (annotations are not): module-level
helpers and other classes in the file belong to other campaigns.

A mutant is applied to the *installed* class, in memory: the mutated class body is compiled
with the module's file name and line numbers, and the one mutated method replaces the real
one on the real class object. Every reference anyone holds (another module's
``from ... import Class``, a subclass, an instance made before) then runs the mutant, which
re-executing the module over its old namespace would not give. Nothing on disk changes, so
the campaign can run against a shared, read-only vLLM install.
"""

from __future__ import annotations

import ast
import copy
import re
import types
from pathlib import Path

from attrs import frozen

CMP_SWAPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
             ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
             ast.Is: ast.IsNot, ast.IsNot: ast.Is}
CMP_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
            ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}
CMP_TOKEN = re.compile(r"<=|>=|==|!=|<|>|not\s+in\b|is\s+not\b|\bin\b|\bis\b")
ARITH_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add}
ARITH_TEXT = {ast.Add: "+", ast.Sub: "-"}
OPERATORS = ("cmp", "arith", "not", "bool", "int", "delete")


@frozen
class Mutant:
    """One change: where (``method``, ``line``), which operator, and the line before and
    after. ``site`` locates the node in the module's ``ast.walk`` order (internal)."""

    index: int
    method: str
    line: int
    operator: str
    before: str
    after: str
    site: tuple

    @property
    def id(self) -> str:
        return f"m{self.index:03d}"

    @property
    def diff(self) -> str:
        """The one-line diff; also the mutant's key in the equivalent-mutant lists (stable
        for one release: it names the line)."""
        return f"{self.method} L{self.line}: {self.before}  ->  {self.after}"


def mutants(source: str, class_name: str) -> list[Mutant]:
    """Every mutant of ``class_name``'s methods in ``source``, in source order; mutants that
    do not compile are dropped."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found = []
    for method, site, node in _sites(tree, class_name):
        before, after = _texts(lines, site, node)
        found.append((node.lineno, getattr(node, "col_offset", 0), site, method, before, after))
    found.sort(key=lambda f: (f[0], f[1], OPERATORS.index(f[2][0])))
    out = []
    for line, _col, site, method, before, after in found:
        candidate = Mutant(len(out), method, line, site[0], before, after, site)
        try:
            compile(mutated_class(source, class_name, candidate), "<mutant>", "exec")
        except SyntaxError:
            continue
        out.append(candidate)
    return out


def mutated_class(source: str, class_name: str, mutant: Mutant) -> ast.Module:
    """A module holding only ``class_name``'s definition, with ``mutant`` applied."""
    tree = ast.parse(source)
    nodes = list(ast.walk(tree))
    kind, index, *rest = mutant.site
    node = nodes[index]
    if kind == "cmp":
        node.ops[rest[0]] = CMP_SWAPS[type(node.ops[rest[0]])]()
    elif kind == "arith":
        node.op = ARITH_SWAPS[type(node.op)]()
    elif kind == "not":
        parent, field, position = nodes[rest[0]], rest[1], rest[2]
        _replace(parent, field, position, node.operand)
    elif kind == "bool":
        node.value = not node.value
    elif kind == "int":
        node.value = node.value + 1
    elif kind == "delete":
        parent, field, position = nodes[rest[0]], rest[1], rest[2]
        _replace(parent, field, position, ast.copy_location(ast.Pass(), node))
    classdef = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    return ast.Module(body=[classdef], type_ignores=[])


def apply(mutant: Mutant, module: types.ModuleType, cls: type) -> None:
    """Make the live ``cls`` run ``mutant``: its mutated method replaces the real one."""
    source = Path(module.__file__).read_text()
    code = compile(mutated_class(source, cls.__name__, mutant), module.__file__, "exec")
    namespace = dict(module.__dict__)          # a copy: the module keeps its real class
    exec(code, namespace)                      # noqa: S102 - the mutant is the point
    fresh = namespace[cls.__name__].__dict__[mutant.method]
    setattr(cls, mutant.method, _rebound(fresh, module.__dict__, cls))


def _rebound(attr, module_globals: dict, cls: type):
    """``attr`` as if defined in ``cls`` itself: the module's globals, and ``super()``'s
    ``__class__`` cell pointing at the real class (not the throwaway one compiled above)."""
    if isinstance(attr, (staticmethod, classmethod)):
        return type(attr)(_rebound(attr.__func__, module_globals, cls))
    if isinstance(attr, property):
        parts = (_rebound(f, module_globals, cls) if f else None
                 for f in (attr.fget, attr.fset, attr.fdel))
        return property(*parts, attr.__doc__)
    if not isinstance(attr, types.FunctionType):
        return attr          # another decorator: keep it (its globals are a module copy)
    closure = attr.__closure__
    if closure:
        closure = tuple(types.CellType(cls) if name == "__class__" else cell
                        for name, cell in zip(attr.__code__.co_freevars, closure, strict=True))
    func = types.FunctionType(attr.__code__, module_globals, attr.__name__, attr.__defaults__,
                              closure)
    func.__kwdefaults__ = attr.__kwdefaults__
    func.__qualname__, func.__doc__ = attr.__qualname__, attr.__doc__
    func.__annotations__ = attr.__annotations__
    func.__dict__.update(attr.__dict__)
    return func


# -- where the operators apply ---------------------------------------------------------------


def _sites(tree: ast.Module, class_name: str):
    """(method, site, node) for every mutation site in the class's methods."""
    classdef = next((n for n in tree.body if isinstance(n, ast.ClassDef)
                     and n.name == class_name), None)
    if classdef is None:
        raise LookupError(f"no top-level class {class_name!r} in the module")
    nodes = list(ast.walk(tree))
    index_of = {id(n): i for i, n in enumerate(nodes)}
    for method in classdef.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node, parent, field, position in _walk_body(method):
            i = index_of[id(node)]
            where = (index_of[id(parent)], field, position)
            for site in _node_sites(node, i, where, method):
                yield method.name, site, node


def _walk_body(method):
    """(node, parent, field, position) under ``method``'s body and defaults, skipping
    annotations (mutating a type hint tests nothing)."""
    todo = [(child, method, "body", k) for k, child in enumerate(method.body)]
    todo += [(d, method.args, "defaults", k) for k, d in enumerate(method.args.defaults)]
    while todo:
        node, parent, field, position = todo.pop(0)
        yield node, parent, field, position
        for name, value in ast.iter_fields(node):
            if name in ("annotation", "returns", "type_comment"):
                continue
            if isinstance(value, list):
                todo += [(v, node, name, k) for k, v in enumerate(value) if isinstance(v, ast.AST)]
            elif isinstance(value, ast.AST):
                todo.append((value, node, name, None))


def _node_sites(node, i: int, where: tuple, method) -> list[tuple]:
    sites = []
    if isinstance(node, ast.stmt) and not isinstance(node, ast.Pass) \
            and not _is_docstring(node, method):
        sites.append(("delete", i, *where))
    if isinstance(node, ast.Compare):
        sites += [("cmp", i, k) for k, op in enumerate(node.ops) if type(op) in CMP_SWAPS]
    elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in ARITH_SWAPS:
        sites.append(("arith", i))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        sites.append(("not", i, *where))
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        sites.append(("bool", i))
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        sites.append(("int", i))
    return sites


def _is_docstring(node, method) -> bool:
    return (node is method.body[0] and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str))


def _replace(parent, field: str, position, new) -> None:
    if position is None:
        setattr(parent, field, new)
    else:
        getattr(parent, field)[position] = new


# -- the one-line diff -------------------------------------------------------------------------


def _texts(lines: list[str], site: tuple, node) -> tuple[str, str]:
    """(before, after): the source line and the same line mutated, or the unparsed node when
    the change spans lines."""
    line = lines[node.lineno - 1]
    kind = site[0]
    if kind == "delete":
        first = line.strip()
        return (first + (" ..." if node.end_lineno != node.lineno else "")), "pass"
    span = _span(site, node)
    if span is None:
        mutated = _mutated_copy(site, node)
        return ast.unparse(node), ast.unparse(mutated)
    start, end, replace = span
    raw = line.encode()
    old = raw[start:end].decode()
    new = replace(old)
    return line.strip(), (raw[:start].decode() + new + raw[end:].decode()).strip()


def _span(site: tuple, node):
    """(start byte, end byte, text -> mutated text) on the node's first line, or None."""
    kind = site[0]
    if kind == "cmp":
        k = site[2]
        left = node.left if k == 0 else node.comparators[k - 1]
        right = node.comparators[k]
        if left.end_lineno != node.lineno or right.lineno != node.lineno:
            return None
        new = CMP_TEXT[CMP_SWAPS[type(node.ops[k])]]
        return left.end_col_offset, right.col_offset, \
            lambda gap: CMP_TOKEN.sub(new, gap, count=1)
    if kind == "arith":
        left, right = (node.target, node.value) if isinstance(node, ast.AugAssign) \
            else (node.left, node.right)
        if left.end_lineno != node.lineno or right.lineno != node.lineno:
            return None
        old, new = ARITH_TEXT[type(node.op)], ARITH_TEXT[ARITH_SWAPS[type(node.op)]]
        return left.end_col_offset, right.col_offset, lambda gap: gap.replace(old, new, 1)
    if kind == "not":
        if node.operand.lineno != node.lineno:
            return None
        return node.col_offset, node.operand.col_offset, lambda gap: ""
    if node.end_lineno != node.lineno:
        return None
    value = (not node.value) if kind == "bool" else node.value + 1
    return node.col_offset, node.end_col_offset, lambda _old: repr(value)


def _mutated_copy(site: tuple, node):
    mutated = copy.deepcopy(node)
    kind = site[0]
    if kind == "cmp":
        mutated.ops[site[2]] = CMP_SWAPS[type(node.ops[site[2]])]()
    elif kind == "arith":
        mutated.op = ARITH_SWAPS[type(node.op)]()
    elif kind == "not":
        mutated = mutated.operand
    elif kind == "bool":
        mutated.value = not node.value
    elif kind == "int":
        mutated.value = node.value + 1
    return mutated
