"""Decisions on opcodes name opcodes of ``fusion/opcodes.py``, and ask its traits for sets.

Read from the source of ``fusion``, ``tiling`` and ``triton_backend`` with ``ast`` (nothing
imported but the opcode table).  An *opcode expression* is a name or attribute whose name ends
in ``opcode`` (``instr.opcode``, ``opcode``, ``producer_opcode``), or a name assigned one in the
same function (``op = instr.opcode``).  The test fails on

* a string compared with an opcode expression (``==``, ``!=``, ``in``, ``not in``, a ``match``
  case), alone or in a literal collection, that is not a key of ``OPCODES``;
* a literal opcode collection outside ``fusion/opcodes.py``: a tuple, list, set or
  ``frozenset(...)`` of strings compared with an opcode expression, written there or bound to
  the name compared (``opcode in _CONTRACTIONS``, followed through imports), a set operation
  with one included.  What the ops of such a set have in common is a trait of ``OpTraits`` (or
  a constant derived from the table, ``opcodes_with(...)``);
* a key of an opcode registry, a dict literal looked up with an opcode expression
  (``RULES[instr.opcode]``, ``RULES.get(opcode)``, ``opcode in RULES``), that is not an opcode;
* a string passed as an opcode that is not one: the argument of a parameter named ``opcode``
  (``hero_count(module, instr, "dot")``, ``b.add(hint, "constant", ...)``, a dataclass field
  such as ``HloInstruction``'s, ``instr.replace(opcode="broadcast")``).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fusion.opcodes import OPCODES

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fusion", "tiling", "triton_backend")
#: The table itself: the one place that lists opcodes by hand.
TABLE = "fusion/opcodes.py"


_COLLECTIONS = (ast.Tuple, ast.List, ast.Set)
_COLLECTION_CALLS = frozenset({"frozenset", "set", "tuple", "list"})


def _is_opcode_name(name: str) -> bool:
    return name.endswith("opcode")


def _strings(node: ast.AST) -> list[ast.Constant]:
    """The string constants a literal collection (or a set operation on one) spells out."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node]
    if isinstance(node, _COLLECTIONS):
        return [s for e in node.elts for s in _strings(e)]
    if isinstance(node, ast.Starred):
        return []
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in _COLLECTION_CALLS:
        return [s for a in node.args for s in _strings(a)]
    if isinstance(node, ast.BinOp):
        return _strings(node.left) + _strings(node.right)
    return []


def _is_collection(node: ast.AST) -> bool:
    """A literal collection, or a set operation / collection call holding one."""
    if isinstance(node, _COLLECTIONS):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in _COLLECTION_CALLS:
        return any(_is_collection(a) for a in node.args)
    if isinstance(node, ast.BinOp):
        return _is_collection(node.left) or _is_collection(node.right)
    return False


@dataclass
class _Module:
    path: str
    tree: ast.Module
    #: module-level name -> its value, or ``(module, name)`` for ``from module import name``.
    names: dict[str, object] = field(default_factory=dict)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _bindings(body: list[ast.stmt]) -> dict[str, object]:
    out: dict[str, object] = {}
    for stmt in body:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                and stmt.value is not None:
            out[stmt.target.id] = stmt.value
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
            for alias in stmt.names:
                out[alias.asname or alias.name] = (stmt.module, alias.name)
    return out


def _signatures(modules: list[_Module]) -> dict[str, list[tuple[str, ...]]]:
    """Function (and method, and dataclass) name -> the parameter names of each definition
    of that name in ``modules``, ``self``/``cls`` dropped."""
    out: dict[str, list[tuple[str, ...]]] = {}
    for module in modules:
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                params = [a.arg for a in (*node.args.posonlyargs, *node.args.args,
                                          *node.args.kwonlyargs)]
                if params[:1] in (["self"], ["cls"]):
                    params = params[1:]
                out.setdefault(node.name, []).append(tuple(params))
            elif isinstance(node, ast.ClassDef) and any(
                    "dataclass" in ast.unparse(d) for d in node.decorator_list):
                fields = tuple(s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                               and isinstance(s.target, ast.Name))
                out.setdefault(node.name, []).append(fields)
    return out


def _modules(sources: dict[str, str] | None = None) -> dict[str, _Module]:
    if sources is None:
        sources = {}
        for package in PACKAGES:
            for path in sorted((ROOT / package).rglob("*.py")):
                sources[_module_name(path)] = path.read_text()
    out = {}
    for name, text in sources.items():
        path = name.replace(".", "/") + ".py"
        if (ROOT / name.replace(".", "/") / "__init__.py").exists():
            path = name.replace(".", "/") + "/__init__.py"
        tree = ast.parse(text, path)
        out[name] = _Module(path, tree, _bindings(tree.body))
    return out


class _Checker(ast.NodeVisitor):
    """Collects the problems of one module (``path:line: what``)."""

    def __init__(self, module: _Module, modules: dict[str, _Module],
                 signatures: dict[str, list[tuple[str, ...]]]) -> None:
        self.module = module
        self.modules = modules
        self.signatures = signatures
        self.local_signatures = _signatures([module])
        self.problems: list[str] = []
        self.scopes: list[tuple[set[str], dict[str, object]]] = []

    # --- scopes: names assigned an opcode expression, and local bindings --------------------
    def _visit_scope(self, node: ast.AST) -> None:
        body = node.body if isinstance(node.body, list) else []
        aliases: set[str] = set()
        for n in ast.walk(node):
            if isinstance(n, ast.Assign):
                for target in n.targets:
                    pairs = [(target, n.value)]
                    if isinstance(target, ast.Tuple) and isinstance(n.value, ast.Tuple):
                        pairs = list(zip(target.elts, n.value.elts))  # op, name = i.opcode, ...
                    aliases |= {t.id for t, v in pairs
                                if isinstance(t, ast.Name) and self._is_opcode(v)}
        self.scopes.append((aliases, _bindings(body)))
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _visit_scope

    def _is_opcode(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return _is_opcode_name(node.attr)
        if isinstance(node, ast.Name):
            return _is_opcode_name(node.id) or any(node.id in a for a, _ in self.scopes)
        return False

    def _resolve(self, name: str) -> tuple[object, _Module] | None:
        """The value ``name`` is bound to (the innermost scope first, imports followed)."""
        for _, bindings in reversed(self.scopes):
            if name in bindings:
                return bindings[name], self.module
        module, seen = self.module, set()
        while name in module.names and (module.path, name) not in seen:
            seen.add((module.path, name))
            value = module.names[name]
            if not isinstance(value, tuple):
                return value, module
            target, name = value
            if target not in self.modules:
                return None
            module = self.modules[target]
        return None

    # --- the checks -------------------------------------------------------------------------
    def _report(self, node: ast.AST, what: str, module: _Module | None = None) -> None:
        self.problems.append(f"{(module or self.module).path}:{node.lineno}: {what}")

    def _check_spelling(self, node: ast.AST, module: _Module | None = None) -> None:
        for s in _strings(node):
            if s.value not in OPCODES:
                self._report(s, f"{s.value!r} is not an opcode of {TABLE}", module)

    def _check_collection(self, node: ast.AST, where: ast.AST, module: _Module | None = None):
        if (module or self.module).path == TABLE:
            return
        self._report(where, f"a hand-written opcode collection ({ast.unparse(node)[:60]}): "
                            f"make it a trait of {TABLE}", module)

    def _check_registry(self, name: ast.AST) -> None:
        """``name`` is looked up with an opcode: a dict literal's keys must be opcodes."""
        if not isinstance(name, ast.Name):
            return
        found = self._resolve(name.id)
        if found is None:
            return
        value, module = found
        if isinstance(value, ast.Dict):
            for key in value.keys:
                if key is not None:
                    self._check_spelling(key, module)
        elif _is_collection(value) or _strings(value):
            self._check_spelling(value, module)
            self._check_collection(value, value, module)

    def visit_Compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        if any(self._is_opcode(s) for s in sides):
            for side in sides:
                if self._is_opcode(side):
                    continue
                if isinstance(side, ast.Constant):
                    self._check_spelling(side)
                elif _is_collection(side):
                    self._check_spelling(side)
                    self._check_collection(side, side)
                elif isinstance(side, ast.Dict):
                    self._check_spelling(ast.List([k for k in side.keys if k is not None]))
                    self._check_collection(side, side)
                elif isinstance(side, ast.BinOp):
                    for part in (side.left, side.right):
                        self._check_registry(part)
                else:
                    self._check_registry(side)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self._is_opcode(node.slice):
            self._check_registry(node.value)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "get" and node.args \
                and self._is_opcode(node.args[0]):
            self._check_registry(func.value)
        for argument in self._opcode_arguments(node):
            for value in (argument.body, argument.orelse) if isinstance(argument, ast.IfExp) \
                    else (argument,):
                if isinstance(value, ast.Constant):
                    self._check_spelling(value)
        self.generic_visit(node)

    def _opcode_arguments(self, node: ast.Call) -> list[ast.AST]:
        """The arguments of ``node`` bound to a parameter named ``opcode`` by every definition
        of the called name that has that position (this module's definitions, if it has one;
        a call on an object of another module's class is resolved by name alone)."""
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        out = [k.value for k in node.keywords if k.arg is not None and _is_opcode_name(k.arg)]
        definitions = self.local_signatures.get(name) or self.signatures.get(name, ())
        for k, argument in enumerate(node.args):
            if isinstance(argument, ast.Starred):
                break
            names = {p[k] for p in definitions if k < len(p)}
            if names and all(_is_opcode_name(n) for n in names):
                out.append(argument)
        return out

    def visit_Match(self, node: ast.Match) -> None:
        if self._is_opcode(node.subject):
            for case in node.cases:
                for pattern in ast.walk(case.pattern):
                    if isinstance(pattern, ast.MatchValue):
                        self._check_spelling(pattern.value)
        self.generic_visit(node)


def opcode_literal_problems(sources: dict[str, str] | None = None) -> list[str]:
    """Every problem of the modules ``sources`` (module name -> text; default: the three
    packages as they are on disk), as ``path:line: what``."""
    modules = _modules(sources)
    signatures = _signatures(list(modules.values()))
    problems = []
    for module in modules.values():
        checker = _Checker(module, modules, signatures)
        checker.visit(module.tree)
        problems += checker.problems
    return sorted(set(problems))


def test_every_opcode_literal_is_an_opcode_and_no_opcode_set_is_written_by_hand():
    problems = opcode_literal_problems()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("source, problem", [
    ('def f(i):\n    return i.opcode == "reduse"\n', "'reduse' is not an opcode"),
    ('def f(i):\n    op = i.opcode\n    return op != "ad"\n', "'ad' is not an opcode"),
    ('S = {"dot"}\ndef f(i):\n    op, n = i.opcode, i.name\n    return op in S\n',
     "hand-written opcode collection"),
    ('def f(i):\n    return i.opcode in ("dot", "convolution")\n', "hand-written opcode collection"),
    ('S = frozenset({"dot", "convolutoin"})\ndef f(i):\n    return i.opcode in S\n',
     "'convolutoin' is not an opcode"),
    ('S = {"dot"} | {"reduce"}\ndef f(opcode):\n    return opcode not in S\n',
     "hand-written opcode collection"),
    ('R = {"add": 1, "sbtract": 2}\ndef f(i):\n    return R.get(i.opcode)\n',
     "'sbtract' is not an opcode"),
    ('R = {"add": 1, "mul": 2}\ndef f(i):\n    return R[i.opcode]\n', "'mul' is not an opcode"),
    ('def f(i):\n    match i.opcode:\n        case "tupel":\n            return 1\n',
     "'tupel' is not an opcode"),
    ('def count(m, opcode):\n    return 0\ndef f(m):\n    return count(m, "dott")\n',
     "'dott' is not an opcode"),
    ('def f(i):\n    return i.replace(opcode="broadcsat")\n', "'broadcsat' is not an opcode"),
])
def test_the_guard_catches(source, problem):
    problems = opcode_literal_problems({"fusion.example": source})
    assert any(problem in p for p in problems), problems


def test_the_guard_follows_imports():
    sources = {
        "fusion.sets": 'CONTRACTIONS = ("dot", "convolution")\n',
        "fusion.user": "from fusion.sets import CONTRACTIONS\n\n"
                       "def f(i):\n    return i.opcode in CONTRACTIONS\n",
    }
    (problem,) = opcode_literal_problems(sources)
    assert problem.startswith("fusion/sets.py:1:") and "hand-written" in problem


def test_the_guard_passes_traits_registries_and_spelled_opcodes():
    source = ('from fusion.opcodes import traits\nR = {"add": 1}\n'
              'def f(i):\n    return (i.opcode == "reduce" or traits(i.opcode).contraction\n'
              '            or R.get(i.opcode))\n')
    assert opcode_literal_problems({"fusion.example": source}) == []
