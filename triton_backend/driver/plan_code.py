"""A host plan as one generated Python function: straight-line code, built once per plan.

``host_plan`` decides how each step of a host program runs (a host op, a view, a tuple, a
tuple element, a prepared launch, or a kernel launched in place: :class:`InlineLaunch`);
:func:`generate` writes the function that runs them, ``run(arguments, context)``, and
compiles it (host code, not a Triton kernel).  Interpreting a tuple per step cost a loop,
a mode dispatch, an operand fetch and a release loop per step; the generated function is
what one would write by hand (a chain of three kernels, ``tests/triton_backend/
test_plan_code.py``'s ``CHAIN``)::

    def run(arguments, context):
        if len(arguments) != 1:
            arguments = pad_arguments(arguments, 1)
        a0, = arguments
        with plan_lock:
            # 'n'
            v0 = allocate1()
            kernel0(a0, v0, num_warps=1, num_stages=1)
            # 'm'
            v1 = allocate3()
            kernel2(v0, v1, num_warps=1, num_stages=1)
            # 'k'; output 0 into the buffer of 'n'
            kernel4(v1, v0, num_warps=1, num_stages=1)
            return v0

A value lives in a local variable, deleted after its last use (as the interpreted program
released it); a parameter is ``a<number>``, a constant a global bound at compile time; a
kernel's permuted output goes to a reader whose permutation undoes it as the buffer itself
(no ``permute``, no ``contiguous``).  The source is registered with ``linecache`` under a
file name naming the computation, so a traceback through a plan shows its line.

**Buffer reuse within one call** (as XLA's buffer assignment): a kernel launched in place
(its outputs allocated by the plan) may write an output into the buffer of a value that
died before it, when both have the same shape and dtype and the output needs no zero fill
(the kernel writes every element).  Only values that are a launched-in-place kernel's own
outputs and are read by kernels alone (launched in place or through a kernel file's
prepared launch, whose results never share memory with their operands) qualify: never a
parameter, a constant, the computation's result (or part of it), a value a host op, a
view, a tuple or a library call reads.  Buffers are never kept across calls (each call
allocates its own, so concurrent calls share nothing); on a GPU, launches on one stream
run in order, so a kernel writing a dead buffer runs after the kernels that read it.  The
plan records what it reused (``Generated.reused``).
"""
from __future__ import annotations

import itertools
import linecache
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: How a step makes its result: a host op's value (with the host context), a callable
#: launch's only output or its tuple, an element of the operand's tuple, a host op that
#: needs no host context (a view), a tuple of the operands, or a kernel launched in place.
HOST, KERNEL_ONE, KERNEL_TUPLE, ELEMENT, PURE, TUPLE, INLINE = range(7)


@dataclass(frozen=True)
class InlineLaunch:
    """A kernel the generated code launches itself (``CompiledFusion.launch_parts``):
    ``kernel(*inputs, *constants, *outputs, **options)``; ``outputs`` one ``(allocate,
    shape, dtype, zeroed)`` per output (``is_tuple``: the value is their tuple, else the
    only one); ``contiguous`` per operand, whether it is known contiguous (else
    ``.contiguous()`` is called on it); ``lock`` held around the kernel
    (None: no lock, or the plan holds it for the whole run); ``input_perms`` per operand the
    permutation of its logical tensor to the buffer the kernel reads (None: row-major; the
    permuted tensor is made contiguous), ``output_perms`` per output the permutation of its
    buffer to the logical value (None: the buffer is the value).  A value that is a
    permuted buffer goes to a reader whose permutation undoes it as the buffer itself."""

    kernel: Callable
    constants: tuple
    outputs: tuple
    options: Mapping[str, Any]
    contiguous: tuple[bool, ...]
    is_tuple: bool = False
    lock: Any = None
    input_perms: tuple = ()
    output_perms: tuple = ()


@dataclass(frozen=True)
class Generated:
    """A generated plan: ``function(arguments, context)``, its ``source`` and ``filename``,
    and ``reused``: per kernel output written into a dead value's buffer, ``(value, output
    index, dead value)`` (HLO names)."""

    function: Callable
    source: str
    filename: str
    reused: tuple[tuple[str, int, str], ...]


def pad_arguments(arguments: Sequence[Any], count: int) -> tuple:
    """``arguments`` as ``count`` values: missing ones None (a missing parameter fails only
    where it is read, as the interpreted program did), extra ones dropped."""
    given = tuple(arguments[:count])
    return given + (None,) * (count - len(given))


@dataclass
class _Statement:
    lines: Callable[[Callable[[int], str]], list[str]]  # rendered with id -> variable name
    reads: tuple[int, ...]
    defines: tuple[int, ...]
    kernel_reads: bool = False  # a kernel file's launch: what it returns never views its reads
    # per output of a kernel launched in place: (id, (shape, dtype), zero-filled)
    outputs: tuple = ()
    reused: dict = field(default_factory=dict)  # output id -> the dead value's HLO name


@dataclass
class _Writer:
    namespace: dict = field(default_factory=dict)
    statements: list = field(default_factory=list)
    ids: Any = field(default_factory=itertools.count)
    escaped: set = field(default_factory=set)  # ids a non-kernel reads: never reused
    origin: dict = field(default_factory=dict)  # id -> (HLO name, output index)

    def bind(self, value: Any, prefix: str) -> str:
        name = f"{prefix}{len(self.namespace)}"
        self.namespace[name] = value
        return name


def _text(ref, name: Callable[[int], str]) -> str:
    return ref if isinstance(ref, str) else name(ref)


def _literal_options(options: Mapping[str, Any]) -> bool:
    """Whether the options read back as keyword literals (a float's nan or inf would not)."""
    return all(isinstance(v, (bool, int, str, type(None))) for v in options.values())


def generate(program: Any, parameters: Mapping[str, int], launches: Mapping[str, tuple], *,
             needs_context: bool, lock: Any = None, reuse: bool = True,
             title: str = "") -> Generated:
    """The function running ``program`` (see the module docstring): ``parameters`` maps its
    parameter steps' names to their numbers, ``launches`` a step's name to ``(mode, call)``
    or ``(mode, call, kernel_file)`` (a step not there is a host op, its executor called with
    the host context; ``kernel_file``: a callable launch is a kernel file's, whose results
    never share memory with its operands); ``lock`` is held over the whole run; ``reuse``
    allows buffer reuse."""
    w = _Writer()
    ref: dict[str, Any] = {name: f"a{k}" for name, k in parameters.items()}
    readers: dict[str, list[int]] = {}
    for step in program.steps:
        for o in step.operands:
            readers.setdefault(o, []).append(launches.get(step.name, (HOST,))[0])
    direct, needs_view = _direct_reads(program, launches)
    buffers: dict[str, tuple[int, tuple]] = {}  # a permuted value -> (its buffer's id, perm)
    elements: dict[tuple[int, int], int] = {}
    for step in program.steps:
        if step.name in parameters:
            continue
        if step.constant is not None:
            ref[step.name] = w.bind(step.constant, "constant")
            continue
        mode, call, *kernel = launches.get(step.name, (HOST, step.execute))
        operands = [ref[o] for o in step.operands]
        reads = tuple(r for r in operands if not isinstance(r, str))
        label = f"# {ascii(step.name)}"
        if mode == ELEMENT:
            producer = operands[0]
            if not isinstance(producer, str) and (producer, call) in elements:
                ref[step.name] = elements[(producer, call)]
                continue
        if mode == INLINE:
            needs_tuple = step.name == program.root or any(
                m != ELEMENT for m in readers.get(step.name, ()))
            args = []
            for j, o in enumerate(step.operands):
                perm = call.input_perms[j] if call.input_perms else None
                if (step.name, j) in direct:
                    args.append((buffers[o][0], None, True))
                else:
                    args.append((ref[o], perm, call.contiguous[j]))
            reads = tuple(r for r, _, _ in args if not isinstance(r, str))
            view = step.name == program.root or step.name in needs_view
            ref[step.name] = _inline(w, step.name, call, args, reads, needs_tuple, view,
                                     elements, buffers, label)
            continue
        v = next(w.ids)
        ref[step.name] = v
        w.statements.append(_Statement(_simple(w, mode, call, operands, v, label), reads, (v,),
                                       kernel_reads=bool(kernel and kernel[0])))
    root = ref[program.root]
    if not isinstance(root, str):
        w.escaped.add(root)
    reused = _assign_buffers(w) if reuse else {}
    return _compile(w, reused, parameters, root, needs_context, lock, title)


def _simple(w: _Writer, mode: int, call: Any, operands: list, v: int, label: str):
    """The lines of a step other than a kernel launched in place."""
    if mode in (HOST, PURE, KERNEL_ONE, KERNEL_TUPLE):
        g = w.bind(call, "host_op" if mode in (HOST, PURE) else "launch")

    def lines(name):
        ops = ", ".join(_text(r, name) for r in operands)
        target = name(v)
        if mode == HOST:
            return [f"{target} = {g}([{ops}], ctx)  {label}"]
        if mode == PURE:
            return [f"{target} = {g}(({ops}{',' if operands else ''}), None)  {label}"]
        if mode == TUPLE:
            return [f"{target} = ({ops}{',' if len(operands) == 1 else ''})  {label}"]
        if mode == ELEMENT:
            return [f"{target} = {ops}[{call}]  {label}"]
        if mode == KERNEL_ONE:
            return [f"{target} = {g}({ops})[0]  {label}"]
        return [f"{target} = tuple({g}({ops}))  {label}"]

    return lines


def _undoes(perm: tuple | None, view: tuple | None) -> bool:
    """Whether permuting a buffer's view (``buffer.permute(*view)``) by ``perm`` gives the
    buffer back."""
    return view is not None and perm is not None and len(perm) == len(view) \
        and all(view[p] == k for k, p in enumerate(perm))


def _direct_reads(program: Any, launches: Mapping[str, tuple]) -> tuple[dict, set]:
    """``(reader, operand index) -> value`` for each operand a kernel launched in place reads
    as the buffer of a permuted output of another (its permutation undoes the output's), and
    the permuted outputs some other reader needs as their logical view."""
    permuted = {}
    for step in program.steps:
        mode, call, *_ = launches.get(step.name, (HOST, None))
        if mode == INLINE and not call.is_tuple and call.output_perms \
                and call.output_perms[0] is not None:
            permuted[step.name] = call.output_perms[0]
    direct, needs_view = {}, set()
    for step in program.steps:
        mode, call, *_ = launches.get(step.name, (HOST, None))
        for j, o in enumerate(step.operands):
            if o not in permuted:
                continue
            if mode == INLINE and call.input_perms \
                    and _undoes(call.input_perms[j], permuted[o]):
                direct[(step.name, j)] = o
            else:
                needs_view.add(o)
    return direct, needs_view


def _inline(w: _Writer, name: str, launch: InlineLaunch, operands: list, reads: tuple,
            needs_tuple: bool, view: bool, elements: dict, buffers: dict, label: str) -> int:
    """Add the statement of a kernel launched in place (``operands``: per operand its
    reference, the permutation to apply and whether it is known contiguous); returns its
    value's reference."""
    kernel = w.bind(launch.kernel, "kernel")
    constants = [w.bind(c, "constant") for c in launch.constants]
    allocators = [w.bind(allocate, "allocate") for allocate, *_ in launch.outputs]
    if _literal_options(launch.options):
        options = [f"{k}={v!r}" for k, v in launch.options.items()]
    else:
        options = [f"**{w.bind(dict(launch.options), 'options')}"]
    lock = w.bind(launch.lock, "lock") if launch.lock is not None else None
    outs = [next(w.ids) for _ in launch.outputs]
    perms = launch.output_perms or (None,) * len(outs)
    logical = list(outs)  # per output, the id of its logical value
    for k, o in enumerate(outs):
        w.origin[o] = (name, k)
        if perms[k] is not None and (launch.is_tuple or view):
            logical[k] = next(w.ids)
            w.escaped.add(o)  # its view lives on
    if not launch.is_tuple and perms[0] is not None:
        buffers[name] = (outs[0], perms[0])
    value = next(w.ids) if launch.is_tuple else logical[0]
    if launch.is_tuple:
        elements.update({(value, k): e for k, e in enumerate(logical)})
        if needs_tuple:
            w.escaped.update(outs)
    built = (value,) if launch.is_tuple and needs_tuple else ()
    views = tuple(e for e, o in zip(logical, outs) if e != o)

    def lines(var):
        text = [label]
        for o, allocate in zip(outs, allocators):
            if o in statement.reused:
                text[0] += f"; output {w.origin[o][1]} into the buffer of " \
                           f"{ascii(statement.reused[o])}"
            else:
                text.append(f"{var(o)} = {allocate}()")
        args = []
        for r, perm, contiguous in operands:
            if perm is not None:
                args.append(f"{_text(r, var)}.permute{tuple(perm)!r}.contiguous()")
            else:
                args.append(_text(r, var) + ("" if contiguous else ".contiguous()"))
        call = f"{kernel}({', '.join(args + constants + [var(o) for o in outs] + options)})"
        text += [f"with {lock}:", f"    {call}"] if lock else [call]
        text += [f"{var(e)} = {var(o)}.permute{tuple(perm)!r}"
                 for e, o, perm in zip(logical, outs, perms) if e != o]
        if built:
            text.append(f"{var(value)} = ({', '.join(map(var, logical))}"
                        f"{',' if len(logical) == 1 else ''})")
        return text

    statement = _Statement(lines, reads, tuple(outs) + views + built, kernel_reads=True,
                           outputs=tuple((o, (tuple(shape), dtype), zeroed) for o, (
                               _, shape, dtype, zeroed) in zip(outs, launch.outputs)))
    w.statements.append(statement)
    return value


def _assign_buffers(w: _Writer) -> dict[int, tuple[int, int]]:
    """Output id -> (the dead id whose buffer it takes, the id that allocated that buffer);
    see the module docstring."""
    last_read: dict[int, int] = {}
    donors: dict[int, Any] = {}
    for i, s in enumerate(w.statements):
        for r in s.reads:
            last_read[r] = i
            if not s.kernel_reads:  # only kernels read reusable buffers
                w.escaped.add(r)
        for o, key, _ in s.outputs:
            donors[o] = (i, key)
    dies_after: dict[int, list[int]] = {}
    for o, (i, key) in donors.items():
        if o not in w.escaped:
            dies_after.setdefault(last_read.get(o, i), []).append(o)
    pool: dict[Any, list[int]] = {}
    taken: dict[int, int] = {}
    buffer_of: dict[int, int] = {}  # an id -> the id that first allocated its buffer
    for i, s in enumerate(w.statements):
        for o, key, zeroed in s.outputs:
            free = None if zeroed else pool.get(key)
            if free:
                donor = free.pop()
                taken[o] = donor
                buffer_of[o] = buffer_of.get(donor, donor)
                s.reused[o] = w.origin[donor][0]
        for dead in dies_after.get(i, ()):
            pool.setdefault(donors[dead][1], []).append(dead)
    return {o: (donor, buffer_of[o]) for o, donor in taken.items()}


def _compile(w: _Writer, reused: dict[int, tuple[int, int]], parameters: Mapping[str, int],
             root: Any, needs_context: bool, lock: Any, title: str) -> Generated:
    def var(i: int) -> str:
        return f"v{reused[i][1]}" if i in reused else f"v{i}"

    body: list[str] = []
    rendered = [s.lines(var) for s in w.statements]
    last_use: dict[str, int] = {}
    for i, s in enumerate(w.statements):
        for r in s.reads + s.defines:
            last_use[var(r)] = i
    keep = _text(root, var)
    dead_after: dict[int, list[str]] = {}
    for name, i in last_use.items():
        if name != keep:
            dead_after.setdefault(i, []).append(name)
    for i, lines in enumerate(rendered):
        body += lines
        if dead_after.get(i) and i + 1 < len(rendered):  # the return frees the rest
            body.append(f"del {', '.join(sorted(dead_after[i], key=lambda n: int(n[1:])))}")
    body.append(f"return {keep}")
    count = len(parameters)
    head = [f"if len(arguments) != {count}:",
            f"    arguments = pad_arguments(arguments, {count})"]
    if count:
        head.append("".join(f"a{k}, " for k in range(count)) + "= arguments")
    if needs_context:
        head.append("ctx = context()")
    if lock is not None:
        w.namespace["plan_lock"] = lock
        head.append("with plan_lock:")
        body = ["    " + line for line in body]
    source = "def run(arguments, context):\n" + "".join(
        f"    {line}\n" for line in head + body)
    filename = f"<host plan {next(_PLANS)}: {ascii(title)[1:-1]}>"  # no NUL, no newline
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    w.namespace["pad_arguments"] = pad_arguments
    exec(compile(source, filename, "exec"), w.namespace)
    reused_names = tuple((w.origin[o][0], w.origin[o][1], w.origin[d][0])
                         for o, (d, _) in sorted(reused.items()))
    return Generated(w.namespace["run"], source, filename, reused_names)


_PLANS = itertools.count()

__all__ = ["ELEMENT", "Generated", "HOST", "INLINE", "InlineLaunch", "KERNEL_ONE",
           "KERNEL_TUPLE", "PURE", "TUPLE", "generate", "pad_arguments"]
