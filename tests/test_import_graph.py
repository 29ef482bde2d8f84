"""The import graph of our three packages, read from the source with ``ast`` (nothing imported).

* no cycle between our modules (module-level imports, ``TYPE_CHECKING`` blocks included);
* no function-local import of our own modules, except the commented allow-list below of the
  places that keep torch/triton/jax out of the analysis-only subcommands;
* the packages import one way: ``fusion`` <- ``tiling`` <- ``triton_backend``;
* inside each package, the folders import one way too, in the order of :data:`LAYERS` (every
  import counts here, ``TYPE_CHECKING`` and function-local ones included), which is the order
  in which each package's docstring lists them.
"""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fusion", "tiling", "triton_backend")
#: Which of our packages each package may import (the one-way order).
MAY_IMPORT = {
    "fusion": {"fusion"},
    "tiling": {"fusion", "tiling"},
    "triton_backend": {"fusion", "tiling", "triton_backend"},
}

#: Each package's folders, lowest first: a module may import its own folder and the folders
#: before it, never one after.  A package's own modules form the folder named by the package.
LAYERS = {
    "fusion": ("fusion", "fusion.ir", "fusion.text", "fusion.analysis", "fusion.shapes",
               "fusion.evaluator", "fusion.transforms", "fusion.autodiff"),
    "tiling": ("tiling", "tiling.maps", "tiling.layouts", "tiling.indexing_analysis",
               "tiling.symbolic", "tiling.policy", "tiling.fusion_pass"),
    "triton_backend": (
        "triton_backend.device_lib", "triton_backend.host", "triton_backend.lowering.emitter",
        "triton_backend.lowering.rules", "triton_backend.lowering", "triton_backend.runtime",
        "triton_backend.templates", "triton_backend.templates.dot",
        "triton_backend.templates.attention", "triton_backend.templates.conv",
        "triton_backend.templates.ragged_dot", "triton_backend.templates.scatter",
        "triton_backend.templates.select_and_scatter",
        "triton_backend.templates.sort", "triton_backend.driver", "triton_backend.tuning",
        "triton_backend.integrations", "triton_backend.reports", "triton_backend.cli",
        "triton_backend"),
}

#: ``(importing module, function, imported module)``: function-local imports of our modules
#: that must stay lazy, because the imported module pulls in torch, triton or jax and the
#: importing module is reached by an analysis-only subcommand (``check``, ``evaluate``,
#: ``indexing``, ``layout``, ``fuse``, ``tile``), which must not import them
#: (``tests/triton_backend/test_cli.py`` runs those in a subprocess and checks).
LAZY_IMPORTS: set[tuple[str, str, str]] = {
    # torch: the compile/run subcommands' modules are all imported by ``build_parser()`` for
    # ``fusion-compile --help``; the driver is imported only when the subcommand runs.
    ("triton_backend.cli.compile_command", "run", "triton_backend.driver.module_compiler"),
    ("triton_backend.cli.run_command", "run", "triton_backend.driver.module_compiler"),
    ("triton_backend.cli.run_command", "run", "triton_backend.host.input_validation"),
    ("triton_backend.cli.world_run", "run_world", "triton_backend.driver.process_launch"),
    ("triton_backend.tuning.autotune", "gpu_available", "triton_backend.runtime.launch_mode"),
    # start-up: ``fusion-compile --version`` answers from argparse and the version alone; the
    # logging, diagnostics and JSON modules come with ``dispatch`` once the arguments parse.
    ("triton_backend.cli", "main", "triton_backend.cli.dispatch"),
    ("triton_backend.cli", "error", "triton_backend.cli.dispatch"),
    # torch: a library sort runs torch.sort; ``check --triton`` imports the sort template.
    ("triton_backend.templates.sort.library_call", "__call__", "triton_backend.host.host_packing"),
    ("triton_backend.templates.sort.library_call", "ordered_sort_key",
     "triton_backend.host.library_calls"),
    # torch: the report compiles and runs the module.
    ("triton_backend.reports.compile_report", "build_report", "triton_backend.driver.module_runner"),
}

def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


# Parsed once per test process and shared by the tests (each used to parse every file of the
# three packages again, a second or two each); the trees and graphs are only read.
@functools.cache
def _modules() -> dict[str, tuple[Path, ast.Module]]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            out[_module_name(path)] = (path, ast.parse(path.read_text(), str(path)))
    return out


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool,
             known: set[str]) -> list[str]:
    """Our modules an import statement names (``from pkg import sub`` names ``pkg.sub``)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = module.split(".")
            anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
            base = ".".join(anchor + ([base] if base else []))
        names = []
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            names.append(sub if sub in known else base)
    return [n for n in names if n.split(".")[0] in PACKAGES]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module, type_checking: bool = False):
    """``(statement, enclosing function or None)`` for every import outside TYPE_CHECKING (and
    inside, with ``type_checking``)."""
    def walk(node, function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child) and not type_checking:
                for sub in child.orelse:
                    yield from walk(sub, function)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, function
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from walk(child, child.name if function is None else function)
            else:
                yield from walk(child, function)
    yield from walk(tree, None)


@functools.cache
def _graph(type_checking: bool = False):
    modules = _modules()
    known = set(modules)
    edges: dict[str, set[str]] = {m: set() for m in modules}
    local: set[tuple[str, str, str]] = set()
    for name, (path, tree) in modules.items():
        is_package = path.name == "__init__.py"
        for node, function in _imports(tree, type_checking):
            for target in _targets(node, name, is_package, known):
                if function is None:
                    edges[name].add(target)
                    edges[name].update(_entered_packages(name, target, known))
                else:
                    local.add((name, function, target))
    return modules, edges, local


def _entered_packages(importer: str, target: str, known: set[str]) -> set[str]:
    """The packages whose ``__init__`` importing ``target`` runs first: its parents, except
    the importer's own (already imported before the importer runs)."""
    parts = target.split(".")
    parents = {".".join(parts[:i]) for i in range(1, len(parts))}
    own = importer.split(".")
    own_parents = {".".join(own[:i]) for i in range(1, len(own) + 1)}
    return {p for p in parents if p in known and p not in own_parents}


def test_no_import_cycle_between_our_modules():
    _, edges, _ = _graph(type_checking=True)
    state: dict[str, int] = {}
    cycles = []

    def visit(m, stack):
        state[m] = 1
        stack.append(m)
        for t in sorted(edges.get(m, ())):
            if t not in edges or t == m:
                continue
            if state.get(t) == 1:
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_function_local_import_of_our_modules_except_the_lazy_ones():
    _, _, local = _graph()
    unexpected = sorted(local - LAZY_IMPORTS)
    assert not unexpected, "function-local imports of our modules:\n" + "\n".join(
        f"{m}.{f}: {t}" for m, f, t in unexpected)
    stale = sorted(LAZY_IMPORTS - local)
    assert not stale, f"allow-list entries no longer in the source: {stale}"


def test_packages_import_one_way():
    modules, edges, local = _graph()
    pairs = {(m, t) for m, ts in edges.items() for t in ts} | {(m, t) for m, _, t in local}
    wrong = sorted((m, t) for m, t in pairs
                   if t.split(".")[0] not in MAY_IMPORT[m.split(".")[0]])
    assert not wrong, f"imports against fusion <- tiling <- triton_backend: {wrong}"


def _folder(module: str, modules) -> str:
    """The folder a module lives in: its package (a package's ``__init__`` is its own folder)."""
    path, _ = modules[module]
    return module if path.name == "__init__.py" else module.rsplit(".", 1)[0]


def test_every_folder_has_a_layer():
    modules = _modules()
    folders = {_folder(m, modules) for m in modules}
    placed = {f for layers in LAYERS.values() for f in layers}
    assert folders == placed, (f"folders without a layer: {sorted(folders - placed)}; "
                               f"layers without a folder: {sorted(placed - folders)}")


def test_folders_import_one_way():
    modules, edges, local = _graph(type_checking=True)
    pairs = {(m, t) for m, ts in edges.items() for t in ts} | {(m, t) for m, _, t in local}
    rank = {f: i for layers in LAYERS.values() for i, f in enumerate(layers)}
    wrong = []
    for m, t in sorted(pairs):
        if t not in modules or m.split(".")[0] != t.split(".")[0]:
            continue
        a, b = _folder(m, modules), _folder(t, modules)
        if rank[b] > rank[a]:
            wrong.append(f"{m} ({a}) imports {t} ({b})")
    assert not wrong, "imports against the folder order of LAYERS:\n" + "\n".join(wrong)


def test_package_docstrings_list_the_folders_in_layer_order():
    """Every folder right below a package is listed in its docstring (``* ``name/``: ...``),
    nested ones may be; the list follows :data:`LAYERS`."""
    for package, layers in LAYERS.items():
        doc = ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text())) or ""
        listed = [f"{package}.{name.replace('/', '.')}"
                  for name in re.findall(r"^\* ``([\w/]+)/``", doc, flags=re.M)]
        assert all(f in layers for f in listed), f"{package}: not folders: {listed}"
        assert listed == sorted(listed, key=layers.index), (
            f"{package}/__init__.py lists {listed} out of the order of LAYERS")
        top = [f for f in layers if f.count(".") == 1]
        missing = [f for f in top if f not in listed]
        assert not missing, f"{package}/__init__.py does not list {missing}"
