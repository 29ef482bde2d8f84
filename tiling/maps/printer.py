"""The text form of affine and indexing maps, as XLA prints them.

One line (current XLA): ``(d0, d1)[s0]{rt0} -> (d1, s0 + rt0), domain: d0 in [0, 9], ...,
rt0 in [0, 3], d0 mod 2 in [0, 0]``; runtime variables are named ``rt<k>``.

Multi-line (the seed's form): header, ``domain:``, one item a line; every symbol is named
``s<j>`` and each runtime variable is followed by indented ``hlo: <instruction>`` and
``<map>`` lines.  A runtime variable without a known instruction prints ``hlo: (unknown)``.
Only the multi-line form carries runtime variables' instructions and maps.
"""
from __future__ import annotations

from typing import Any, Callable


def _names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def _header(num_dims: int, symbol_names: list[str], rt_names: list[str], results, dn, sn) -> str:
    text = "(" + ", ".join(_names("d", num_dims)) + ")"
    if symbol_names:
        text += "[" + ", ".join(symbol_names) + "]"
    if rt_names:
        text += "{" + ", ".join(rt_names) + "}"
    return text + " -> (" + ", ".join(r.to_str(dn, sn) for r in results) + ")"


def format_affine_map(m: Any) -> str:
    """``(d0, d1)[s0] -> (d1, s0)``."""
    dn = lambda i: f"d{i}"  # noqa: E731
    sn = lambda j: f"s{j}"  # noqa: E731
    return _header(m.num_dims, _names("s", m.num_symbols), [], m.results, dn, sn)


def format_hlo(hlo: Any) -> str:
    """An instruction as ``name = shape opcode(operands)`` (strings are printed as given)."""
    if hlo is None:
        return "(unknown)"
    if isinstance(hlo, str):
        return hlo
    if hlo.opcode == "parameter":
        args = str(hlo.attr("parameter_number", ""))
    else:
        args = ", ".join(hlo.operands)
    return f"{hlo.name} = {hlo.shape} {hlo.opcode}({args})"


def format_indexing_map(m: Any, multiline: bool) -> str:
    if m.is_undefined:
        return "UNDEFINED"
    if m.is_known_empty:
        return "KNOWN EMPTY"
    nr = m.num_range_vars
    dn: Callable[[int], str] = lambda i: f"d{i}"  # noqa: E731
    if multiline:
        sn: Callable[[int], str] = lambda j: f"s{j}"  # noqa: E731
        header = _header(m.num_dims, _names("s", m.num_symbols), [], m.results, dn, sn)
    else:
        sn = lambda j: f"s{j}" if j < nr else f"rt{j - nr}"  # noqa: E731
        header = _header(m.num_dims, _names("s", nr), _names("rt", m.num_rt_vars),
                         m.results, dn, sn)
    items: list[str] = [f"d{i} in {b}" for i, b in enumerate(m.dim_bounds)]
    items += [f"s{j} in {b}" for j, b in enumerate(m.range_bounds)]
    for k, v in enumerate(m.rt_vars):
        if multiline:
            items.append(f"s{nr + k} in {v.feasible_values}")
            items.append(f"  hlo: {format_hlo(v.hlo)}")
            if v.map is not None:
                items.append(f"  {format_affine_map(v.map)}")
        else:
            items.append(f"rt{k} in {v.feasible_values}")
    # Sorted by text, as XLA prints them (the seed lists `(d1 - 3) mod 7` before `d2 mod 2`).
    items += sorted(f"{e.to_str(dn, sn)} in {iv}" for e, iv in m.constraints)
    if not items:
        return header
    if multiline:
        return header + "\ndomain:\n" + "\n".join(items)
    return header + ", domain: " + ", ".join(items)
