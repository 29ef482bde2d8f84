"""Hostile HLO names and metadata: generated kernels stay correct, distinct and inert.

The HLO parser only accepts ``[A-Za-z_][A-Za-z0-9_.-]*`` names, but an ``HloModule`` built in
memory (or by a future parser) may carry anything, so the modules here are parsed with
placeholder names and then renamed in memory to Python keywords, builtins, the kernel file's
own globals and locals, quotes, backslashes, line breaks, unicode, code injection attempts and
names that sanitize to the same identifier.  Each compiled kernel must

* compute what the reference evaluator computes (so no two values share a variable),
* parse with ``ast``, contain no line break other than ``\\n`` (so no comment can end early),
  keep every payload inside comments or string literals, and call only ``tl.*``,
  ``triton.*``, ``xla_math.*``, its own helpers and a few builtins outside the fixed host
  template, and
* never run the injected code (a sentinel file is never created).
"""
from __future__ import annotations

import ast
import io
import keyword
import tokenize
import uuid

import numpy as np
import pytest

from fusion.ir.attributes import RawText
from fusion.evaluator import evaluate
from fusion.ir.hlo_module import HloComputation, HloModule
from fusion.text.parser import parse_hlo
from tests.triton_backend.fusion_check import (
    assert_matches,
    random_array,
    to_numpy,
    to_torch,
)
from triton_backend.lowering.host_template import PRELUDE, RUNTIME
from triton_backend.driver.compiled_fusion import compile_fusion
from triton_backend.lowering.emitter.identifiers import KERNEL_RESERVED_NAMES

SENTINEL_DIR = "/tmp"

#: Names a kernel file binds at module level or in its kernel body (read from kernel_file.py,
#: host_template.py, value_emitter.py, reduction_rules.py and combine_function.py).
KERNEL_OWN_NAMES = (
    "KERNEL", "GRID", "INPUT_SPECS", "CONSTANT_SPECS", "OUTPUT_SPECS", "PADDED_OUTPUTS",
    "OUTPUT_FROM_INPUT", "run", "example_inputs", "_physical", "_logical", "os", "pid",
    "pid_rest", "tile0", "tile1", "i0", "i1", "out_mask", "tile_zero", "in0_ptr", "in1_ptr",
    "out0_ptr", "fusion_kernel", "combine_add", "a0", "b0", "a_valid", "b_valid", "both", "r0",
    "offs", "mask", "acc", "k0",
)
KEYWORDS_AND_BUILTINS = ("def", "return", "lambda", "None", "True", "class", "import", "match",
                         "print", "range", "len", "float", "int", "__import__", "__builtins__",
                         "self", "exec", "eval")


def injection(tag: str) -> str:
    return f"__import__('os').system('touch {SENTINEL_DIR}/pwned_{tag}')"


QUOTING = ('a"b', "a'b", "a\\b", 'x"""y', "x'''y", "#c", "a b", "a\nb", "a\rb", "a\u2028b",
           "a\x0bb", "a\x0cb", "a\x1cb", "a\x85b", "a\x00b", "héllo", "π", "a.b", "a-b", "a_b",
           "1st", "")


# --- building modules with arbitrary names --------------------------------------------------------

_CALLED = ("calls", "to_apply")


def rename(module: HloModule, instructions: dict[str, str], computations: dict[str, str]) -> HloModule:
    """``module`` with instruction and computation names replaced (names not listed are kept)."""
    def comp(name):
        return computations.get(name, name)

    def attrs(instr):
        return tuple((k, comp(v) if k in _CALLED and isinstance(v, str) else v)
                     for k, v in instr.attributes)
    def local(n):
        return instructions.get(n, n)
    new = []
    for c in module.computations:
        body = tuple(i.replace(name=local(i.name), operands=tuple(local(o) for o in i.operands),
                               attributes=attrs(i)) for i in c.instructions)
        new.append(HloComputation(comp(c.name), body, local(c.root_name), c.is_entry))
    return HloModule(module.name, tuple(new), comp(module.entry_name))


def fused_module(module: HloModule, fusion_name: str) -> HloModule:
    fusion = next(i for _, i in module.fusions() if i.name == fusion_name)
    return HloModule(module.name, module.computations, fusion.attr("calls"))


LOOP = """HloModule m
f {
  p0 = f32[4,6] parameter(0)
  p1 = f32[4,6] parameter(1)
  n0 = f32[4,6] add(p0, p1)
  n1 = f32[4,6] multiply(p0, p1)
  n2 = f32[4,6] subtract(p0, p1)
  c0 = f32[] constant(0.5)
  n3 = f32[4,6] broadcast(c0), dimensions={}
  n4 = f32[4,6] add(n0, n3)
  n5 = f32[4,6] multiply(n4, n1)
  c1 = f32[6] constant({1, -2, 3, -4, 5, -6})
  n7 = f32[4,6] broadcast(c1), dimensions={1}
  n8 = f32[4,6] add(n5, n7)
  ROOT n6 = f32[4,6] subtract(n8, n2)
}
ENTRY e {
  x0 = f32[4,6] parameter(0)
  x1 = f32[4,6] parameter(1)
  ROOT fu = f32[4,6] fusion(x0, x1), kind=kLoop, calls=f
}
"""

REDUCTION = """HloModule m
r {
  ra = f32[] parameter(0)
  rb = f32[] parameter(1)
  ROOT rs = f32[] add(ra, rb)
}
f {
  p0 = f32[4,6] parameter(0)
  p1 = f32[4,6] parameter(1)
  n0 = f32[4,6] multiply(p0, p1)
  c0 = f32[] constant(0)
  n1 = f32[4] reduce(n0, c0), dimensions={1}, to_apply=r
  n2 = f32[4] reduce(p0, c0), dimensions={1}, to_apply=r
  ROOT n3 = f32[4] subtract(n1, n2)
}
ENTRY e {
  x0 = f32[4,6] parameter(0)
  x1 = f32[4,6] parameter(1)
  ROOT fu = f32[4] fusion(x0, x1), kind=kInput, calls=f
}
"""

_LOOP_NAMES = ("p0", "p1", "n0", "n1", "n2", "c0", "n3", "n4", "n5", "n6", "c1", "n7", "n8")
_REDUCTION_NAMES = ("p0", "p1", "n0", "c0", "n1", "n2", "n3", "ra", "rb", "rs")


def hostile_module(template: str, names: list[str], computation_names: dict[str, str],
                   fusion_name: str) -> HloModule:
    module = parse_hlo(template)
    placeholders = _LOOP_NAMES if template is LOOP else _REDUCTION_NAMES
    # Placeholders past the given names reuse them with a suffix (names stay unique).
    mapping = {p: names[k] if k < len(names) else names[k - len(names)] + "\u00b7"
               for k, p in enumerate(placeholders)}
    mapping["fu"] = fusion_name
    return rename(module, mapping, computation_names)


# --- checks -------------------------------------------------------------------------------------

#: Builtins a generated kernel or its spec lines may call.
ALLOWED_BUILTINS = frozenset({"float", "range", "min", "max", "len"})
#: Methods generated kernels call on tensors.
ALLOWED_METHODS = frozenset({"to"})
_LINE_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x00"


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def check_inert(source: str, payload_markers: tuple[str, ...]) -> None:
    """The generated file's structure is fixed; hostile text only in comments and strings.

    ``payload_markers`` are token sequences joined by single spaces (e.g. ``"__import__ ("``).
    """
    assert not any(ch in source for ch in _LINE_BREAKS), "a raw line break outside \\n"
    tree = ast.parse(source)
    assert source.endswith(RUNTIME), "the host template was altered"
    assert PRELUDE in source
    generated = ast.parse(source[:len(source) - len(RUNTIME)])
    helpers = {n.name for n in generated.body if isinstance(n, ast.FunctionDef)}
    # HLO-derived functions (kernel, combiners) never collide with each other or with the
    # template's globals (which the template itself may set twice, e.g. a default then a value).
    functions = [n.name for n in generated.body if isinstance(n, ast.FunctionDef)]
    assigned = {t.id for n in generated.body if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Name)}
    assert len(functions) == len(set(functions)), f"a function is defined twice: {functions}"
    assert not set(functions) & assigned, f"a function shadows a global: {set(functions) & assigned}"
    assert not helpers & {"run", "example_inputs", "_physical", "_logical", "os", "torch"}
    for node in ast.walk(generated):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name):
            assert func.id in helpers | ALLOWED_BUILTINS, f"call to {func.id}"
        elif isinstance(func, ast.Attribute):
            root = _root_name(func)
            if root in ("tl", "triton", "xla_math"):
                continue
            if root in ("os", "torch") and ast.unparse(func) in ("os.environ.setdefault",
                                                                  "torch.cuda.is_available"):
                continue  # the PRELUDE, checked verbatim above
            assert func.attr in ALLOWED_METHODS, f"call to {ast.unparse(func)}"
        else:
            pytest.fail(f"call of a computed callee: {ast.unparse(func)}")
    for fn in (n for n in generated.body if isinstance(n, ast.FunctionDef)):
        # SSA: a variable bound twice would let one HLO value overwrite another.
        targets = [t.id for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets
                   if isinstance(t, ast.Name)]
        in_loops = {t.id for loop in ast.walk(fn) if isinstance(loop, ast.For)
                    for n in ast.walk(loop) if isinstance(n, ast.Assign) for t in n.targets
                    if isinstance(t, ast.Name)}
        repeated = {t for t in targets if targets.count(t) > 1} - in_loops
        assert not repeated, f"{fn.name}: rebinds {repeated}"
        params = {a.arg for a in fn.args.args}
        assert not params & set(targets), f"{fn.name}: overwrites its parameters"
        assert not (params | set(targets)) & (KERNEL_RESERVED_NAMES | set(keyword.kwlist))
    # The payload's code shape (``__import__ (``, ``1 / 0``) never appears among code tokens;
    # sanitized identifiers may still spell its letters (``v___import____os___system...``).
    code = " ".join(t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)
                    if t.type in (tokenize.NAME, tokenize.OP, tokenize.NUMBER))
    for marker in payload_markers:
        assert marker not in code, f"payload {marker!r} reached code"
    del tree


PAYLOAD = ("__import__ (", "system (", "touch /")


def run_and_check(module: HloModule, fusion_name: str, markers: tuple[str, ...] = PAYLOAD):
    compiled = compile_fusion(module, fusion_name)
    check_inert(compiled.source, markers)
    fusion = next(i for _, i in module.fusions() if i.name == fusion_name)
    params = module.computation(fusion.attr("calls")).parameters
    rng = np.random.default_rng(0)
    arrays = [random_array(p.shape, rng) for p in params]
    want = evaluate(fused_module(module, fusion_name), *arrays)
    got = compiled(*[to_torch(a, p.shape.dtype) for a, p in zip(arrays, params)])
    for g, w in zip(got, want):
        assert_matches(to_numpy(g, "f32"), w, "f32", exact=False, reduction_length=6)
    return compiled


def _sentinels() -> set[str]:
    import glob
    return set(glob.glob(f"{SENTINEL_DIR}/pwned_*"))


@pytest.fixture
def no_new_sentinel():
    before = _sentinels()
    yield
    assert _sentinels() == before, "injected code ran"


# --- tests --------------------------------------------------------------------------------------

NAME_SETS = {
    "keywords": KEYWORDS_AND_BUILTINS[:10],
    "builtins": KEYWORDS_AND_BUILTINS[8:] + ("tl", "triton", "torch"),
    "kernel_globals": KERNEL_OWN_NAMES[:10],
    # "pid" (KERNEL_OWN_NAMES[12]) is left to test_hlo_value_named_pid_does_not_rebind_the_program_id.
    "kernel_locals": KERNEL_OWN_NAMES[13:23],
    "combiner_locals": KERNEL_OWN_NAMES[25:35],
    "quoting": QUOTING[:10],
    "line_breaks": QUOTING[7:17],
    "unicode_and_empty": QUOTING[15:],
    "same_sanitized": ("a.b", "a_b", "a-b", "a b", "a+b", "a_b_1", "a.b.1", "a_b_2", "a/b", "a__b"),
}


@pytest.mark.parametrize("template", ["loop", "reduction"])
@pytest.mark.parametrize("name_set", sorted(NAME_SETS))
def test_hostile_instruction_names(template, name_set, no_new_sentinel):
    names = list(NAME_SETS[name_set])
    tag = uuid.uuid4().hex[:8]
    names[-1] = injection(tag) if name_set != "same_sanitized" else names[-1]
    fusion_name = names[0] if name_set != "unicode_and_empty" else "fusion"
    computations = {"f": names[1] or "f", "r": names[2] or "r", "e": "main"}
    module = hostile_module(LOOP if template == "loop" else REDUCTION, names, computations,
                            fusion_name)
    run_and_check(module, fusion_name)


@pytest.mark.parametrize("template", ["loop", "reduction"])
def test_injection_in_every_position(template, no_new_sentinel):
    """Every instruction, the computations and the fusion carry executable-looking names."""
    tag = uuid.uuid4().hex[:8]
    names = [f"{injection(tag)}#{k}\n{injection(tag)}" for k in range(10)]
    computations = {"f": f"f');{injection(tag)}#", "r": f'r");{injection(tag)}#', "e": "main"}
    module = hostile_module(LOOP if template == "loop" else REDUCTION, names, computations,
                            f"\"\"\"{injection(tag)}\"\"\"")
    run_and_check(module, module.fusions()[0][1].name)


def test_names_that_sanitize_alike_stay_distinct():
    """``a.b``, ``a_b`` and ``a-b`` hold different values; a collision would change the result."""
    module = hostile_module(LOOP, ["a.b", "a-b", "a_b", "a b", "a+b", "a_b_1", "a.b.1", "a_b_2",
                                   "a/b", "a__b"], {}, "fu")
    compiled = run_and_check(module, "fu")
    kernel = next(n for n in ast.parse(compiled.source).body
                  if isinstance(n, ast.FunctionDef) and n.name == "fu_kernel")
    bound = [t.id for n in ast.walk(kernel) if isinstance(n, ast.Assign) for t in n.targets]
    assert len(bound) == len(set(bound))


@pytest.mark.parametrize("breaker", ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028",
                                     "\u2029", "\r\n", "\x00"])
def test_metadata_cannot_break_out_of_the_header_comment(breaker, no_new_sentinel):
    tag = uuid.uuid4().hex[:8]
    payload = f"{breaker}{injection(tag)}{breaker}x = 1/0{breaker}"
    module = parse_hlo(LOOP)
    fused = module.computation("f")
    body = tuple(i.replace(attributes=i.attributes + (("metadata", RawText(
        f'{{op_name="{payload}" source_file="{payload}"}}')),)) for i in fused.instructions)
    entry = module.entry
    entry_body = tuple(i.replace(attributes=i.attributes + (("metadata", RawText(
        f'{{op_type="{payload}"}}')),)) if i.opcode == "fusion" else i for i in entry.instructions)
    module = HloModule("m", (HloComputation("f", body, fused.root_name),
                             HloComputation("e", entry_body, entry.root_name, True)), "e")
    compiled = run_and_check(module, "fu", PAYLOAD + ("1 / 0", "x = 1"))
    assert "pwned" in compiled.source  # the HLO is quoted (escaped), not dropped


def test_kernel_file_run_as_a_script_stays_inert(tmp_path):
    """``python kernel_<hash>.py`` (the file's ``__main__``) runs without executing any name."""
    import os
    import subprocess
    import sys
    tag = uuid.uuid4().hex[:8]
    names = [f"{injection(tag)}\u2028{injection(tag)}"] + [f"v{k}" for k in range(9)]
    module = hostile_module(LOOP, names, {"f": injection(tag)}, "fu")
    compiled = compile_fusion(module, "fu")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, str(compiled.kernel_path)], capture_output=True,
                            text=True, env=env, timeout=120, cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "output0" in result.stdout
    assert not os.path.exists(f"{SENTINEL_DIR}/pwned_{tag}")


def test_hlo_value_named_pid_does_not_rebind_the_program_id():
    module = parse_hlo(LOOP.replace("p0", "pid"))
    compiled = compile_fusion(module, "fu")
    check_inert(compiled.source, PAYLOAD)
