"""An instruction's ``backend_config`` as data: JSON, or protobuf text format, as XLA accepts.

XLA prints a backend config as JSON (``backend_config={"fusion_backend_config":{"kind":
"__triton"}}``), and its parser also takes the protobuf text format of the same message
(``backend_config={ fusion_backend_config:{ kind: "__triton" } }``).  Both become nested dicts;
in the text format a field written more than once (a repeated field) becomes a list, and a
field written once stays a single value, so readers use :func:`as_list` on repeated fields.
Scalars stay as written: strings unquoted, numbers and enum words as text (a proto ``int64``
is a JSON string too), ``true``/``false`` as booleans.

>>> parse_backend_config('{"fusion_backend_config": {"kind": "__triton"}}')
{'fusion_backend_config': {'kind': '__triton'}}
>>> cfg = parse_backend_config('{ fusion_backend_config:{ kind: "__triton" block_level_fusion_config:'
...                            '{ output_tiles:{ sizes:"1" sizes:"128"} num_warps:"4" } } }')
>>> cfg["fusion_backend_config"]["block_level_fusion_config"]
{'output_tiles': {'sizes': ['1', '128']}, 'num_warps': '4'}
>>> parse_backend_config("not a config") is None
True
"""
from __future__ import annotations

import json
import re
from typing import Any

# One token of the text format: a string, a brace, ':' or a separator, or a bare word/number.
_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\'|([{}<>:,;\[\]])|([^\s{}<>:,;"\'\[\]]+))')
_CLOSE = {"{": "}", "<": ">"}


class _TextFormatError(ValueError):
    pass


def parse_backend_config(text: str) -> dict | None:
    """The config as nested dicts, or ``None`` when ``text`` is neither form (or empty).

    The text may be bare, single-quoted, or a quoted JSON string (as older dumps write it).
    """
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        text = text[1:-1].strip()
    elif text.startswith('"'):
        try:
            inner = json.loads(text)
            text = inner.strip() if isinstance(inner, str) else text
        except ValueError:
            pass
    if not text:
        return None
    try:
        value = json.loads(text)
        return value if isinstance(value, dict) else None
    except ValueError:
        pass
    try:
        return _parse_text_format(text)
    except _TextFormatError:
        return None


def as_list(value: Any) -> list:
    """A repeated field's values: a list as is, a single value as a one-item list, None as []."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise _TextFormatError(f"unexpected character at {pos}")
        pos = m.end()
        if m.group(1) is not None or m.group(2) is not None:
            raw = m.group(1) if m.group(1) is not None else m.group(2)
            out.append(("str", bytes(raw, "utf-8").decode("unicode_escape")))
        elif m.group(3) is not None:
            out.append(("punct", m.group(3)))
        else:
            out.append(("word", m.group(4)))
    return out


def _parse_text_format(text: str) -> dict:
    toks = _tokens(text)
    if toks and toks[0] == ("punct", "{") and toks[-1] == ("punct", "}"):
        toks = toks[1:-1]  # backend_config={ ... } wraps the message in braces
    message, end = _message(toks, 0, None)
    if end != len(toks):
        raise _TextFormatError("trailing text")
    return message


def _message(toks: list[tuple[str, str]], i: int, close: str | None) -> tuple[dict, int]:
    fields: dict[str, Any] = {}
    while i < len(toks):
        kind, text = toks[i]
        if kind == "punct" and text == close:
            return fields, i + 1
        if kind == "punct" and text in ",;":
            i += 1
            continue
        if kind != "word":
            raise _TextFormatError(f"expected a field name, found {text!r}")
        i += 1
        if i < len(toks) and toks[i] == ("punct", ":"):
            i += 1
        if i >= len(toks):
            raise _TextFormatError(f"field {text} has no value")
        value, i = _value(toks, i)
        if text in fields:
            previous = fields[text]
            fields[text] = (previous if isinstance(previous, list) else [previous]) + [value]
        else:
            fields[text] = value
    if close is not None:
        raise _TextFormatError("message not closed")
    return fields, i


def _value(toks: list[tuple[str, str]], i: int) -> tuple[Any, int]:
    kind, text = toks[i]
    if kind == "punct" and text in _CLOSE:
        return _message(toks, i + 1, _CLOSE[text])
    if kind == "punct" and text == "[":  # a list of scalars or messages
        items, i = [], i + 1
        while i < len(toks) and toks[i] != ("punct", "]"):
            if toks[i] == ("punct", ","):
                i += 1
                continue
            item, i = _value(toks, i)
            items.append(item)
        if i >= len(toks):
            raise _TextFormatError("list not closed")
        return items, i + 1
    if kind == "str":
        # Adjacent strings concatenate, as in C and the text format.
        parts = [text]
        while i + 1 < len(toks) and toks[i + 1][0] == "str":
            i += 1
            parts.append(toks[i][1])
        return "".join(parts), i + 1
    if kind == "word":
        return {"true": True, "false": False}.get(text, text), i + 1
    raise _TextFormatError(f"unexpected {text!r}")
