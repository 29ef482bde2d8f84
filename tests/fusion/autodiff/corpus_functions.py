"""The JAX source functions of the HLO test corpus (``tests/data/hlo/generate_corpus.py``),
imported without leaking the generator's global 64-bit switch into the rest of the run."""
from __future__ import annotations

import importlib.util
import pathlib

import jax

CORPUS = pathlib.Path(__file__).resolve().parents[2] / "data" / "hlo"


def load_cases() -> dict:
    """``{name: (function, example_args)}`` as the generator defines them."""
    was_x64 = jax.config.jax_enable_x64
    spec = importlib.util.spec_from_file_location("corpus_generator",
                                                  CORPUS / "generate_corpus.py")
    generator = importlib.util.module_from_spec(spec)
    try:
        # The example args are made at import, in the generator's 64-bit mode.
        spec.loader.exec_module(generator)
    finally:
        jax.config.update("jax_enable_x64", was_x64)
    return generator.CASES
