"""Parsing of instruction attribute values, one rule per attribute key.

``ATTRIBUTE_RULES`` maps XLA's spelling of a key to the kind of value it holds; keys it does
not list (``metadata``, ``backend_config``, ``sharding``, anything new) are kept as
``RawText`` exactly as written, so an unknown attribute is never an error.

>>> from fusion.text.lexer import Lexer
>>> read_attribute_value(Lexer("{[0:4:2], [1:3]}"), "slice")
(SliceDim(start=0, limit=4, stride=2), SliceDim(start=1, limit=3, stride=1))
>>> read_attribute_value(Lexer("1_2x0_-1_3"), "padding")
PaddingConfig(dims=(PaddingDim(low=1, high=2, interior=0), PaddingDim(low=0, high=-1, interior=3)))
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable

import numpy as np

from fusion.ir.attributes import PaddingConfig, PaddingDim, RawText, SliceDim, Window, WindowDim
from fusion.text.lexer import Lexer, Token


def _int(lexer: Lexer, tok: Token, what: str) -> int:
    try:
        if tok.kind != "NUM":
            raise ValueError
        return int(tok.text, 0)
    except ValueError:
        raise lexer.error(f"bad {what} {tok.text or 'end of input'!r}", tok.pos,
                          text=tok.text or None, expected="an integer") from None


def read_int(lexer: Lexer, key: str) -> int:
    return _int(lexer, lexer.next(), f"value for {key}")


def read_bool(lexer: Lexer, key: str) -> bool:
    tok = lexer.next()
    if tok.text not in ("true", "false"):
        raise lexer.error(f"bad value for {key}: {tok.text or 'end of input'!r}", tok.pos,
                          text=tok.text or None, expected="true or false")
    return tok.text == "true"


def read_float(lexer: Lexer, key: str) -> float:
    """A number (``epsilon=0.001``, ``1e-05``)."""
    tok = lexer.next()
    try:
        if tok.kind != "NUM":
            raise ValueError
        return float(tok.text)
    except ValueError:
        raise lexer.error(f"bad value for {key}: {tok.text or 'end of input'!r}", tok.pos,
                          text=tok.text or None, expected="a number") from None


def read_word(lexer: Lexer, key: str) -> str:
    """A bare enum-like word (``kLoop``, ``LT``, ``TOTALORDER``); quotes are accepted too."""
    tok = lexer.next()
    if tok.kind == "STRING":
        return _unquote(tok.text)
    if tok.kind not in ("NAME", "NUM"):
        raise lexer.error(f"bad value for {key}: {tok.text or 'end of input'!r}", tok.pos,
                          text=tok.text or None, expected="a word such as kLoop or LT")
    return tok.text


def read_string(lexer: Lexer, key: str) -> str:
    """A quoted string (``custom_call_target="foo"``); a bare word is accepted too."""
    return read_word(lexer, key)


def read_raw_word(lexer: Lexer, key: str) -> str:
    """A word that may contain ``->`` (``dim_labels=b01f_01io->b01f``), read as characters."""
    start = _skip_blanks(lexer.text, lexer.pos)
    end = lexer.raw_value(start)
    if end == start:
        raise lexer.error(f"missing value for {key}", start, expected=f"a value after {key}=")
    lexer.seek(end)
    return lexer.text[start:end]


def read_computation(lexer: Lexer, key: str) -> str:
    tok = lexer.next()
    if tok.kind != "NAME":
        raise lexer.error(f"bad computation name for {key}: {tok.text or 'end of input'!r}",
                          tok.pos, text=tok.text or None, expected="a computation name")
    return tok.text.lstrip("%")


def read_computation_list(lexer: Lexer, key: str) -> tuple[str, ...] | str:
    if lexer.peek().kind != "{":
        return read_computation(lexer, key)
    lexer.next()
    return _items_to_brace(lexer, key, read_computation)


def read_dims(lexer: Lexer, key: str) -> tuple[int, ...]:
    """``{0,1}`` (XLA also accepts a bare ``0`` for one dim)."""
    if lexer.peek().kind != "{":
        return (read_int(lexer, key),)
    lexer.next()
    return _items_to_brace(lexer, key, read_int)


def read_int_lists(lexer: Lexer, key: str) -> tuple[tuple[int, ...], ...]:
    """``{{0,1},{2,3}}``, ``{}`` (``source_target_pairs``, ``replica_groups``).

    >>> read_int_lists(Lexer("{{0,1},{2}}"), "replica_groups"), read_int_lists(Lexer("{}"), "g")
    (((0, 1), (2,)), ())
    """
    lexer.expect("{", f"'{{' opening {key}")
    return _items_to_brace(lexer, key, _braced_ints)


def _braced_ints(lexer: Lexer, key: str) -> tuple[int, ...]:
    lexer.expect("{", f"'{{' opening a list of integers in {key}")
    return _items_to_brace(lexer, key, read_int)


def read_replica_groups(lexer: Lexer, key: str) -> tuple[tuple[int, ...], ...]:
    """``{{0,1},{2,3}}``, or XLA's iota form ``[groups,size]<=[dims]`` with an optional
    transpose ``T(perm)``, expanded to the explicit groups it stands for.

    >>> read_replica_groups(Lexer("[2,2]<=[2,2]T(1,0)"), "replica_groups")
    ((0, 2), (1, 3))
    """
    if lexer.peek().text == "mesh" and lexer.peek(1).kind == "[":
        return _mesh_replica_groups(lexer, key)
    if lexer.peek().kind != "[":
        return read_int_lists(lexer, key)
    start = lexer.peek().pos
    shape = _bracketed_ints(lexer, key)
    lexer.expect("<=", f"'<=' in the iota form of {key}, e.g. [2,4]<=[8]")
    dims = _bracketed_ints(lexer, key)
    perm = tuple(range(len(dims)))
    if lexer.peek().text == "T" and lexer.peek(1).kind == "(":
        lexer.next()
        lexer.next()
        perm = tuple(_items_to_close(lexer, key, ")"))
    ids = np.arange(math.prod(dims))
    if len(shape) != 2 or sorted(perm) != list(range(len(dims))) \
            or math.prod(shape) != ids.size:
        raise lexer.error(f"bad iota {key}", start, expected="[groups,size]<=[dims] with "
                          "groups*size elements, optionally T(permutation of the dims)")
    groups = ids.reshape(dims).transpose(perm).reshape(shape)
    return tuple(tuple(int(i) for i in group) for group in groups)


_MESH_GROUPS = re.compile(r"mesh\[(?P<axes>[^\]]*)\]\s*\{(?P<chosen>[^}]*)\}")
_MESH_AXIS = re.compile(r"\s*'(?P<name>[^']+)'\s*=\s*(?P<size>\d+)\s*$")


def _mesh_replica_groups(lexer: Lexer, key: str) -> tuple[tuple[int, ...], ...]:
    """XLA's mesh form ``mesh['a'=2,'b'=2] {'a'}``: the devices of an iota mesh (ids
    row-major over its axes) that differ only along the chosen axes form a group; it is
    expanded to the explicit groups (and printed so).

    >>> read_replica_groups(Lexer("mesh['a'=2,'b'=2] {'a'}"), "replica_groups")
    ((0, 2), (1, 3))
    """
    start = lexer.skip_space(lexer.pos)
    match = _MESH_GROUPS.match(lexer.text, start)
    axes = [_MESH_AXIS.match(a) for a in match["axes"].split(",")] if match else [None]
    chosen = [c.strip().strip("'") for c in match["chosen"].split(",")] if match else []
    names = [a["name"] for a in axes if a is not None]
    if None in axes or not chosen or any(c not in names for c in chosen) \
            or len(set(chosen)) != len(chosen):
        raise lexer.error(f"bad mesh form of {key}", start,
                          expected="mesh['axis'=size,...] {'axis',...} naming mesh axes")
    sizes = [int(a["size"]) for a in axes]
    ids = np.arange(math.prod(sizes)).reshape(sizes)
    order = [names.index(c) for c in chosen]
    rest = [d for d in range(len(names)) if d not in order]
    groups = ids.transpose(rest + order).reshape(-1, math.prod(sizes[d] for d in order))
    lexer.seek(match.end())
    return tuple(tuple(int(i) for i in group) for group in groups)


def _bracketed_ints(lexer: Lexer, key: str) -> tuple[int, ...]:
    lexer.expect("[", f"'[' in the iota form of {key}")
    return _items_to_close(lexer, key, "]")


def _items_to_close(lexer: Lexer, key: str, close: str) -> tuple[int, ...]:
    items: list[int] = []
    while lexer.peek().kind != close:
        if items:
            lexer.expect(",", f"',' or '{close}' in {key}")
        items.append(read_int(lexer, key))
    lexer.next()
    return tuple(items)


def read_words(lexer: Lexer, key: str) -> tuple[str, ...]:
    """``{default,highest}`` (operand precision)."""
    lexer.expect("{", f"'{{' opening {key}")
    return _items_to_brace(lexer, key, read_word)


def _items_to_brace(lexer: Lexer, key: str, read_item: Callable[[Lexer, str], Any]) -> tuple:
    """The ``,``-separated items of a ``{...}`` list whose ``{`` is read, and its ``}``."""
    items: list = []
    while lexer.peek().kind != "}":
        if items:
            lexer.expect(",", f"',' or '}}' in {key}")
        items.append(read_item(lexer, key))
    lexer.next()
    return tuple(items)


def read_slice(lexer: Lexer, key: str) -> tuple[SliceDim, ...]:
    lexer.expect("{", "'{' opening slice={[start:limit:stride], ...}")
    dims: list[SliceDim] = []
    while lexer.peek().kind != "}":
        if dims:
            lexer.expect(",", "',' or '}' between slice dims")
        lexer.expect("[", "'[' opening a slice dim [start:limit] or [start:limit:stride]")
        parts = [read_int(lexer, "slice start")]
        while lexer.peek().kind == ":":
            lexer.next()
            parts.append(read_int(lexer, "slice bound"))
        close = lexer.expect("]", "']' closing the slice dim")
        if len(parts) not in (2, 3):
            raise lexer.error("a slice dim needs start:limit or start:limit:stride", close.pos,
                              expected="[start:limit] or [start:limit:stride]")
        dims.append(SliceDim(*parts))
    lexer.next()
    return tuple(dims)


def read_padding(lexer: Lexer, key: str) -> PaddingConfig:
    tok = lexer.next()
    dims: list[PaddingDim] = []
    for part in tok.text.split("x") if tok.kind == "NUM" else ["?"]:
        fields = part.split("_")
        try:
            if len(fields) not in (2, 3):
                raise ValueError
            dims.append(PaddingDim(*(int(f) for f in fields)))
        except ValueError:
            raise lexer.error(f"bad padding {tok.text or 'end of input'!r}", tok.pos,
                              text=tok.text or None,
                              expected="low_high[_interior] per dim joined by 'x', e.g. 0_0x1_2_1"
                              ) from None
    return PaddingConfig(tuple(dims))


_WINDOW_FIELDS = ("size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal")


def read_window(lexer: Lexer, key: str) -> Window:
    lexer.expect("{", "'{' opening window={size=... stride=... pad=...}")
    fields: dict[str, list] = {}
    while lexer.peek().kind != "}":
        name = lexer.next()
        if name.text not in _WINDOW_FIELDS:
            raise lexer.error(f"unknown window field {name.text or 'end of input'!r}", name.pos,
                              text=name.text or None, expected="one of " + ", ".join(_WINDOW_FIELDS))
        lexer.expect("=", f"'=' after window field {name.text}")
        value = lexer.next()
        try:
            if value.kind != "NUM":
                raise ValueError
            parts = value.text.split("x")
            if name.text == "pad":
                fields["pad"] = [tuple(int(v) for v in p.split("_")) for p in parts]
                if any(len(p) != 2 for p in fields["pad"]):
                    raise ValueError
            else:
                fields[name.text] = [int(p) for p in parts]
        except ValueError:
            raise lexer.error(f"bad window {name.text} {value.text or 'end of input'!r}",
                              value.pos, text=value.text or None,
                              expected="NxM... (pad: low_high per dim)") from None
    close = lexer.next()
    rank = len(fields.get("size", ()))
    if any(len(v) != rank for v in fields.values()):
        raise lexer.error("window fields disagree on the number of dims", close.pos,
                          expected=f"{rank} dims in every field (from size=)")
    dims = []
    for d in range(rank):
        pad = fields.get("pad", [(0, 0)] * rank)[d]
        dims.append(WindowDim(
            size=fields["size"][d],
            stride=fields.get("stride", [1] * rank)[d],
            padding_low=pad[0],
            padding_high=pad[1],
            window_dilation=fields.get("rhs_dilate", [1] * rank)[d],
            base_dilation=fields.get("lhs_dilate", [1] * rank)[d],
            window_reversal=bool(fields.get("rhs_reversal", [0] * rank)[d]),
        ))
    return Window(tuple(dims))


def read_raw(lexer: Lexer, key: str) -> RawText:
    """Any value, verbatim: ``{...}`` balanced, a quoted string, or text up to ',' / newline."""
    start = _skip_blanks(lexer.text, lexer.pos)
    end = lexer.raw_value(start)
    if end == start:
        raise lexer.error(f"missing value for attribute {key}", start,
                          expected=f"a value after {key}=")
    lexer.seek(end)
    return RawText(lexer.text[start:end])


def _skip_blanks(text: str, pos: int) -> int:
    # Not past a line break: 'key=' at the end of a line has no value.
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    return pos


def _unquote(text: str) -> str:
    return text[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape") \
        if "\\" in text else text[1:-1]


_DIMS = read_dims
_INT_ = read_int

# Keys whose values are typed; every other key is kept as RawText.  Alphabetical.
ATTRIBUTE_RULES: dict[str, Callable[[Lexer, str], Any]] = {
    "algorithm": read_word,
    "api_version": read_word,
    "batch_group_count": _INT_,
    "body": read_computation,
    "branch_computations": read_computation_list,
    "called_computations": read_computation_list,
    "calls": read_computation_list,
    "channel_id": _INT_,
    "collapsed_slice_dims": _DIMS,
    "condition": read_computation,
    "constrain_layout": read_bool,
    "custom_call_has_side_effect": read_bool,
    "custom_call_schedule": read_word,
    "custom_call_target": read_string,
    "delta": _INT_,
    "dim_labels": read_raw_word,
    "dimensions": _DIMS,
    "direction": read_word,
    "distribution": read_word,
    "dynamic_slice_sizes": _DIMS,
    "epsilon": read_float,
    "exponent_bits": _INT_,
    "false_computation": read_computation,
    "feature_group_count": _INT_,
    "feature_index": _INT_,
    "fft_length": _DIMS,
    "fft_type": read_word,
    "index": _INT_,
    "index_vector_dim": _INT_,
    "indices_are_sorted": read_bool,
    "input_batching_dims": _DIMS,
    "inserted_window_dims": _DIMS,
    "iota_dimension": _INT_,
    "is_stable": read_bool,
    "k": _INT_,
    "kind": read_word,
    "largest": read_bool,
    "left_side": read_bool,
    "lhs_batch_dims": _DIMS,
    "lhs_contracting_dims": _DIMS,
    "lhs_ragged_dims": _DIMS,
    "lower": read_bool,
    "mantissa_bits": _INT_,
    "offset_dims": _DIMS,
    "operand_batching_dims": _DIMS,
    "operand_precision": read_words,
    "padding": read_padding,
    "padding_type": read_word,
    "precision_config": read_words,
    "replica_groups": read_replica_groups,
    "rhs_batch_dims": _DIMS,
    "rhs_contracting_dims": _DIMS,
    "rhs_group_dims": _DIMS,
    "scatter": read_computation,
    "scatter_dims_to_operand_dims": _DIMS,
    "scatter_indices_batching_dims": _DIMS,
    "select": read_computation,
    "slice": read_slice,
    "slice_sizes": _DIMS,
    "source_target_pairs": read_int_lists,
    "start_index_map": _DIMS,
    "start_indices_batching_dims": _DIMS,
    "to_apply": read_computation,
    "transpose_a": read_word,
    "true_computation": read_computation,
    "type": read_word,
    "unique_indices": read_bool,
    "unit_diagonal": read_bool,
    "update_window_dims": _DIMS,
    "use_global_device_ids": read_bool,
    "window": read_window,
}


def rule_for_attribute(key: str) -> Callable[[Lexer, str], Any]:
    """The reader of attribute ``key``'s value (``read_raw`` for keys not listed)."""
    return ATTRIBUTE_RULES.get(key, read_raw)


def read_attribute_value(lexer: Lexer, key: str) -> Any:
    """Read the value of attribute ``key`` (the text after ``key=``)."""
    return ATTRIBUTE_RULES.get(key, read_raw)(lexer, key)
