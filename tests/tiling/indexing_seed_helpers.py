"""Shared helpers of the indexing-analysis tests: build modules from the seed's snippets and
compare maps with the seed's printed text."""
from __future__ import annotations

import re

from fusion.text.parser import parse_hlo


def module_of(body: str, extra: str = ""):
    """A module whose ENTRY is ``body`` (the seed's instruction lines; the last is ROOT)."""
    lines = [line for line in body.strip().splitlines() if line.strip()]
    joined: list[str] = []
    for line in lines:  # the seed wraps long instructions over several lines
        if joined and joined[-1].rstrip().endswith((",", "(")):
            joined[-1] += " " + line.strip()
        else:
            joined.append(line.strip())
    if not joined[-1].startswith("ROOT"):
        joined[-1] = "ROOT " + joined[-1]
    text = "HloModule m\n" + extra + "\nENTRY e {\n  " + "\n  ".join(joined) + "\n}\n"
    return parse_hlo(text)


MAX = """
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
"""


def normalize(text: str) -> str:
    """Whitespace-insensitive form of a printed map (the seed indents and double-spaces)."""
    lines = [re.sub(r"\s+", " ", line).strip() for line in text.strip().splitlines()]
    return "\n".join(line for line in lines if line)


def texts(maps) -> list[str]:
    return sorted(normalize(m.to_string(multiline=True)) for m in maps)


def only(maps):
    assert len(maps) == 1, [str(m) for m in maps]
    return next(iter(maps))
