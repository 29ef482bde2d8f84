"""Inputs and outputs of a module as ``.npz`` archives, and deterministic random inputs.

Convention: inputs are named ``p0..pN`` in the order of the ENTRY computation's parameters,
outputs ``o0..oM`` (a tuple result flattened depth first).  Element types NumPy cannot store
natively (bf16, the f8/f4 types, s4/u4/s2/u2) are stored as their bits in an unsigned integer
of the same byte width (``uint16`` for bf16, ``uint8`` for the rest), and the archive holds a
``_dtypes`` entry: a JSON string mapping every key to its HLO element type, e.g.
``{"p0": "bf16", "o0": "f32"}``.  Archives without ``_dtypes`` are read by NumPy dtype; an
array ``np.savez`` wrote from an ``ml_dtypes`` array (bf16, the f8 types, int4: NumPy records
raw bytes, ``|V2`` or ``|V1``) is read as the type of the parameter it feeds, which must have
that many bytes per element.

>>> import io, ml_dtypes
>>> buf = io.BytesIO()
>>> save_arrays(buf, {"p0": np.array([1.5, -2], ml_dtypes.bfloat16)}, {"p0": "bf16"})
>>> _ = buf.seek(0)
>>> a = load_arrays(buf)["p0"]
>>> a.dtype.name, a.tolist()
('bfloat16', [1.5, -2.0])
"""
from __future__ import annotations

import json
import os
import zipfile
from typing import IO, Mapping, Union

import numpy as np

from fusion.ir.element_types import ELEMENT_TYPES, element_type, element_type_of_numpy
from fusion.errors import EvaluationError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits
from fusion.evaluator.size_limit import check_module_size

DTYPES_KEY = "_dtypes"
PathOrFile = Union[str, os.PathLike, IO[bytes]]

_NATIVE = frozenset(
    {"pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "f32", "f64",
     "c64", "c128"}
)


def _storage(name: str) -> np.dtype:
    return np.dtype(np.uint16) if element_type(name).bits == 16 else np.dtype(np.uint8)


def _to_storage(array: np.ndarray, name: str) -> np.ndarray:
    if name in _NATIVE:
        return np.asarray(array, element_type(name).numpy_dtype())
    t = element_type(name)
    typed = np.asarray(array, t.numpy_dtype())
    if t.bits >= 8:
        return typed.view(_storage(name))
    # Sub-byte types: keep only the type's own bits (ml_dtypes sign-extends within the byte).
    return (typed.astype(np.int16) & ((1 << t.bits) - 1)).astype(np.uint8)


def _from_storage(stored: np.ndarray, name: str, key: str, where: str) -> np.ndarray:
    t = element_type(name)
    if name in _NATIVE:
        return _exact_cast(stored, t.numpy_dtype(), name, key, where)
    if stored.dtype != _storage(name):
        raise EvaluationError(f"array '{key}' of type {name} must be stored as "
                              f"{_storage(name)}, found {stored.dtype}", where=where)
    if t.bits >= 8:
        return stored.view(t.numpy_dtype())
    bits = stored.astype(np.int16) & ((1 << t.bits) - 1)
    if t.kind == "signed":
        bits = np.where(bits >= 1 << (t.bits - 1), bits - (1 << t.bits), bits)
    return bits.astype(t.numpy_dtype())


def _exact_cast(stored: np.ndarray, want: np.dtype, name: str, key: str, where: str) -> np.ndarray:
    """``stored`` as ``want`` when no value changes but by float rounding; else an error.

    Refused: a dropped imaginary part, a finite value that becomes inf, and (to an integer
    or pred) NaN, a fraction or a value out of range.  ``0.1`` f64 -> f32 rounds, as any
    float conversion does, and is allowed.

    >>> _exact_cast(np.array([2.0, -3.0]), np.dtype(np.int32), "s32", "p0", "in.npz").tolist()
    [2, -3]
    >>> _exact_cast(np.array([1e10, 2.9]), np.dtype(np.int32), "s32", "p0", "in.npz")
    Traceback (most recent call last):
    ...
    fusion.errors.EvaluationError: in.npz: array 'p0' (float64) cannot be read as s32 without changing its values: element [0] is 10000000000.0
    """
    if stored.dtype == want:
        return stored
    if stored.dtype.kind == "c" and want.kind != "c":
        changed = stored.imag != 0
        if not np.any(changed):  # a real value stored as complex: read its real part
            return _exact_cast(np.ascontiguousarray(stored.real), want, name, key, where)
        converted = None
    else:
        with np.errstate(all="ignore"):
            converted = stored.astype(want)
            if want.kind in "fc":
                changed = np.isfinite(stored) & ~np.isfinite(converted)
            else:
                changed = converted != stored  # compared by value, in a common type
    if np.any(changed):
        first = np.argwhere(np.asarray(changed)).reshape(-1, stored.ndim)[0]
        index = tuple(int(i) for i in first)
        shown = ",".join(map(str, index))
        raise EvaluationError(
            f"array '{key}' ({stored.dtype}) cannot be read as {name} without changing its "
            f"values: element [{shown}] is {stored[index].item()!r}",
            where=where)
    return converted


def save_arrays(path: PathOrFile, arrays: Mapping[str, np.ndarray], dtypes: Mapping[str, str]) -> None:
    """Write ``arrays`` to ``path`` with the ``_dtypes`` entry; ``dtypes`` names each key's type.

    A key missing from ``dtypes`` takes the HLO type of its NumPy dtype.
    """
    names = {k: dtypes.get(k) or element_type_of_numpy(np.asarray(a).dtype).name
             for k, a in arrays.items()}
    stored = {k: _to_storage(np.asarray(a), names[k]) for k, a in arrays.items()}
    np.savez(path, **stored, **{DTYPES_KEY: np.array(json.dumps(names))})


def load_arrays(path: PathOrFile) -> dict[str, np.ndarray]:
    """Read an archive written by ``save_arrays`` (or plain ``np.savez``), restoring bf16 etc.

    Anything else is a one-line ``EvaluationError`` naming the file (and the key): not an npz
    archive (empty, a ``.npy`` file, not a zip, a corrupt member), an array that holds no
    numbers (objects, bytes, strings), a header claiming more elements than the file holds,
    a malformed ``_dtypes`` entry, or a value the ``_dtypes`` type cannot hold exactly.
    """
    where = str(getattr(path, "name", path))
    try:
        magic = _magic(path)
        if not magic:
            raise EvaluationError("the file is empty, not an npz archive", where=where)
        if magic.startswith(b"\x93NUMPY"):
            raise EvaluationError("not an npz archive but a single .npy array; write inputs "
                                  "with numpy.savez", where=where)
        if not magic.startswith(b"PK"):
            raise EvaluationError("not an npz archive (not a zip file); write inputs with "
                                  "numpy.savez", where=where)
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise EvaluationError(f"cannot read npz file: {_reason(err)}", where=where) from None
    if not isinstance(archive, np.lib.npyio.NpzFile):  # np.load's own sniffing disagreed
        raise EvaluationError("not an npz archive; write inputs with numpy.savez", where=where)
    with archive:
        raw = {k: _read_member(archive, k, where) for k in archive.files}
    names: dict[str, str] = {}
    if DTYPES_KEY in raw:
        try:
            names = json.loads(str(raw.pop(DTYPES_KEY)))
            if not isinstance(names, dict):
                raise ValueError(f"a JSON {type(names).__name__}, not an object")
        except ValueError as err:
            raise EvaluationError(f"'{DTYPES_KEY}' entry is not a JSON object: {err}",
                                  where=where) from None
    out = {}
    for key, stored in raw.items():
        name = names.get(key)
        if name is None:
            out[key] = stored
        elif not isinstance(name, str) or name not in ELEMENT_TYPES \
                or not ELEMENT_TYPES[name].has_values:
            raise EvaluationError(f"'{DTYPES_KEY}' gives unknown element type {name!r} "
                                  f"for '{key}'", where=where)
        else:
            out[key] = _from_storage(stored, name, key, where)
    return out


def _magic(path: PathOrFile) -> bytes:
    """The first bytes of the file, the position of a file object left unchanged."""
    if hasattr(path, "read"):
        position = path.tell()
        head = path.read(6)
        path.seek(position)
        return head
    with open(path, "rb") as f:
        return f.read(6)


def _reason(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def _read_member(archive: "np.lib.npyio.NpzFile", key: str, where: str) -> np.ndarray:
    """One array, its header checked before any data is read (a header may claim 2^40
    elements in a file of a few bytes); numbers only (no objects, bytes or strings)."""
    member = key + ".npy"
    try:
        info = archive.zip.getinfo(member)
        with archive.zip.open(info) as f:
            version = np.lib.format.read_magic(f)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read_header(f)
            data_bytes = info.file_size - f.tell()
        _check_header(key, shape, dtype, data_bytes, where)
        array = archive[key]
    except EvaluationError:
        raise
    except (KeyError, OSError, ValueError, TypeError, EOFError, zipfile.BadZipFile,
            MemoryError) as err:
        raise EvaluationError(f"cannot read array '{key}': {_reason(err)}", where=where) from None
    if not _holds_numbers(array.dtype) and key != DTYPES_KEY:
        raise EvaluationError(f"array '{key}' has NumPy dtype {array.dtype}, which holds no "
                              "numbers", where=where)
    return array


def _holds_numbers(dtype: np.dtype) -> bool:
    """Numbers, or the raw 1- or 2-byte elements ``np.savez`` writes for an ``ml_dtypes``
    array (read as the parameter's type)."""
    return dtype.kind in "biufc" or _raw_bytes(dtype)


def _raw_bytes(dtype: np.dtype) -> bool:
    return dtype.kind == "V" and dtype.names is None and dtype.itemsize in (1, 2) \
        and not dtype.hasobject


def _check_header(key: str, shape: tuple, dtype: np.dtype, data_bytes: int, where: str) -> None:
    if key != DTYPES_KEY and not _holds_numbers(dtype):
        raise EvaluationError(f"array '{key}' has NumPy dtype {dtype}, which holds no numbers",
                              where=where)
    count = 1
    for d in shape:
        count *= int(d)
    if count * dtype.itemsize > data_bytes:
        raise EvaluationError(f"array '{key}' claims shape {list(shape)} ({count} elements of "
                              f"{dtype}) but its file holds only {data_bytes} bytes", where=where)


def input_arrays(module: HloModule, arrays: Mapping[str, np.ndarray], source: str) -> list[np.ndarray]:
    """``p0..pN`` from ``arrays`` in parameter order, checked against the ENTRY's parameters.

    Missing or extra keys, wrong shapes and wrong element types are ``EvaluationError``s
    naming the key, what was found and what the parameter declares.
    """
    params = module.entry.parameters
    wanted = [f"p{n}" for n in range(len(params))]
    extra = sorted(set(arrays) - set(wanted))
    if extra:
        raise EvaluationError(f"{source} has unexpected array(s) {', '.join(extra)}; the entry "
                              f"computation takes {', '.join(wanted) or 'no parameters'}",
                              where=source)
    out = []
    for key, param in zip(wanted, params):
        shape = param.shape
        if key not in arrays:
            raise EvaluationError(f"{source} has no array '{key}' for parameter "
                                  f"{param.name} ({shape})", where=source)
        if not isinstance(shape, ArrayShape):
            raise EvaluationError(f"parameter {param.name} has tuple shape {shape}; npz inputs "
                                  "hold arrays only", where=source)
        array = arrays[key]
        want = element_type(shape.dtype).numpy_dtype()
        if _raw_bytes(array.dtype) and shape.dtype not in _NATIVE \
                and array.dtype.itemsize == want.itemsize:
            array = array.view(want)  # an ml_dtypes array as np.savez wrote it
        if array.dtype != want:
            found = _hlo_name(array.dtype)
            raise EvaluationError(f"array '{key}' has element type {found}, but parameter "
                                  f"{param.name} is {shape}", where=source)
        if tuple(array.shape) != shape.dims:
            raise EvaluationError(f"array '{key}' has shape {list(array.shape)}, but parameter "
                                  f"{param.name} is {shape}", where=source)
        out.append(array)
    return out


def _hlo_name(dtype: np.dtype) -> str:
    if _raw_bytes(dtype):
        return f"raw {dtype.itemsize}-byte values ({dtype}, as np.savez writes an ml_dtypes array)"
    try:
        return element_type_of_numpy(dtype).name
    except KeyError:
        return str(dtype)


def random_inputs(module: HloModule, seed: int = 0) -> list[np.ndarray]:
    """Deterministic random arrays for the ENTRY's parameters.

    Floats are uniform in [-2, 2]; integers that feed indices (dynamic-slice and
    dynamic-update-slice starts, gather and scatter indices, also through converts, fusions
    and calls) lie in ``[0, bound]`` so that every index is in range; other integers are small
    ([-4, 4], unsigned [0, 8]); pred is random.  A module too large to evaluate is refused
    with an ``EvaluationError`` (``fusion.evaluator.size_limit``) before anything is allocated.

    >>> from fusion.text.parser import parse_hlo
    >>> m = parse_hlo('''HloModule m
    ... ENTRY e {
    ...   x = f32[5] parameter(0)
    ...   i = s32[] parameter(1)
    ...   ROOT d = f32[2] dynamic-slice(x, i), dynamic_slice_sizes={2}
    ... }''')
    >>> x, i = random_inputs(m, seed=3)
    >>> x.dtype.name, bool(abs(x).max() <= 2), 0 <= int(i) <= 3
    ('float32', True, True)
    """
    check_module_size(module)  # never allocate inputs for a module too large to evaluate
    rng = np.random.default_rng(seed)
    bounds = _index_bounds(module)
    out = []
    for param in module.entry.parameters:
        shape = param.shape
        if not isinstance(shape, ArrayShape):
            raise EvaluationError(f"parameter {param.name} has tuple shape {shape}; random "
                                  "inputs are made for array parameters only", where=param.name)
        out.append(_random_array(rng, shape, bounds.get((module.entry_name, param.name)),
                                 param.name))
    return out


def _random_array(rng: np.random.Generator, shape: ArrayShape, bound: int | None,
                  where: str) -> np.ndarray:
    t = element_type(shape.dtype)
    dims = shape.dims
    if t.kind == "pred":
        values = rng.integers(0, 2, size=dims).astype(bool)
    elif t.kind == "float":
        values = rng.uniform(-2.0, 2.0, size=dims)
    elif t.kind == "complex":
        values = rng.uniform(-2.0, 2.0, size=dims) + 1j * rng.uniform(-2.0, 2.0, size=dims)
    elif bound is not None:
        values = rng.integers(0, max(bound, 0) + 1, size=dims)
    elif t.kind == "signed":
        low = -min(4, 2 ** (t.bits - 1))
        values = rng.integers(low, -low + (0 if t.bits < 4 else 1), size=dims)
    elif t.kind == "unsigned":
        values = rng.integers(0, min(8, 2**t.bits - 1) + 1, size=dims)
    else:
        raise EvaluationError(f"cannot make random values of type {shape.dtype}", where=where)
    return np.asarray(values).astype(t.numpy_dtype())


def _index_bounds(module: HloModule) -> dict[tuple[str, str], int]:
    """(computation, parameter name) -> the largest value that keeps every index use in range."""
    bounds: dict[tuple[str, str], int] = {}
    pending: list[tuple[str, str, int]] = []
    for comp in module.computations:
        for instr in comp.instructions:
            for operand, bound in _index_operands(comp, instr):
                pending.append((comp.name, operand, bound))
    callers = _callers(module)
    seen: set[tuple[str, str, int]] = set()
    while pending:
        item = pending.pop()
        if item in seen:
            continue
        seen.add(item)
        comp_name, name, bound = item
        comp = module.computation(comp_name)
        # An index may be computed from a parameter (JAX wraps negative starts with
        # compare/add/select); every integer parameter it depends on gets the bound.
        for ancestor in _ancestors(comp, name):
            instr = comp.instruction(ancestor)
            if instr.opcode != "parameter":
                continue
            key = (comp_name, ancestor)
            bounds[key] = min(bound, bounds.get(key, bound))
            number = instr.attr("parameter_number")
            for caller_comp, caller in callers.get(comp_name, ()):
                if number < len(caller.operands):
                    pending.append((caller_comp, caller.operands[number], bound))
    return bounds


def _index_operands(comp: HloComputation, instr: HloInstruction) -> list[tuple[str, int]]:
    """``(index operand, largest in-range value)`` of every index operand of ``instr``."""
    rule = _INDEX_OPERANDS.get(instr.opcode)
    return [] if rule is None else rule(lambda name: _dims(comp, name), instr)


def _dims(comp: HloComputation, name: str) -> tuple[int, ...]:
    shape = comp.instruction(name).shape
    return shape.dims if isinstance(shape, ArrayShape) else ()


def _dynamic_slice_indices(dims, instr: HloInstruction) -> list[tuple[str, int]]:
    sizes = instr.attr("dynamic_slice_sizes", ())
    return [(s, d - z) for s, d, z in zip(instr.operands[1:], dims(instr.operands[0]), sizes)]


def _dynamic_update_slice_indices(dims, instr: HloInstruction) -> list[tuple[str, int]]:
    update = dims(instr.operands[1])
    return [(s, d - u) for s, d, u in zip(instr.operands[2:], dims(instr.operands[0]), update)]


def _gather_indices(dims, instr: HloInstruction) -> list[tuple[str, int]]:
    if len(instr.operands) != 2:
        return []
    sizes = instr.attr("slice_sizes", ())
    room = [d - s for d, s in zip(dims(instr.operands[0]), sizes)]
    mapped = [room[d] for d in instr.attr("start_index_map", ()) if d < len(room)]
    return [(instr.operands[1], min(mapped, default=0))]


def _scatter_indices(dims, instr: HloInstruction) -> list[tuple[str, int]]:
    if len(instr.operands) < 3:
        return []
    n = len(instr.operands) // 2
    operand, update = dims(instr.operands[0]), dims(instr.operands[n + 1])
    skipped = set(instr.attr("inserted_window_dims", ())) | set(
        instr.attr("input_batching_dims", ()))
    window = iter(update[d] for d in instr.attr("update_window_dims", ()) if d < len(update))
    room = [size - (1 if d in skipped else next(window, 1)) for d, size in enumerate(operand)]
    mapped = [room[d] for d in instr.attr("scatter_dims_to_operand_dims", ()) if d < len(room)]
    return [(instr.operands[n], min(mapped, default=0))]


#: The ops that read at offsets given by index operands -> their index operands and bounds.
_INDEX_OPERANDS = {
    "dynamic-slice": _dynamic_slice_indices,
    "dynamic-update-slice": _dynamic_update_slice_indices,
    "gather": _gather_indices,
    "scatter": _scatter_indices,
}


def _ancestors(comp: HloComputation, name: str) -> list[str]:
    out, stack, seen = [], [name], {name}
    while stack:
        current = stack.pop()
        out.append(current)
        if not comp.has_instruction(current):
            continue
        for operand in comp.instruction(current).operands:
            if operand not in seen:
                seen.add(operand)
                stack.append(operand)
    return out


def _callers(module: HloModule) -> dict[str, list[tuple[str, HloInstruction]]]:
    """Callee -> (calling computation, instruction) for calls that pass operands as parameters."""
    out: dict[str, list[tuple[str, HloInstruction]]] = {}
    for comp in module.computations:
        for instr in comp.instructions:
            if traits(instr.opcode).inlinable:
                for callee in instr.called_computations():
                    out.setdefault(callee, []).append((comp.name, instr))
    return out


def output_arrays(value: object) -> list[np.ndarray]:
    """An evaluator result (array, or nested tuple/list of arrays) flattened depth first."""
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in output_arrays(v)]
    return [np.asarray(value)]


__all__ = ["DTYPES_KEY", "input_arrays", "load_arrays", "output_arrays",
           "random_inputs", "save_arrays"]
