"""Record XLA's own ``rng`` draws with the keys it chose: ``xla_draws.json``.

XLA's ``RngExpander`` keys each ``rng`` with a 64-bit value drawn from a process-wide
generator, so its draws cannot be predicted from the HLO text.  This script compiles each
case with XLA on the CPU (``tests.conformance.xla_oracle``) in a child process that dumps the
module after the ``rng-expander`` pass, reads the key constant the pass wrote, and records
the key with the executable's first two draws.  ``tests/fusion/test_rng.py`` then checks that
``fusion.evaluator.rng_distribution_ops`` computes XLA's values from XLA's key and state.

    python tests/data/rng/generate_xla_draws.py     # rewrites xla_draws.json
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OUT = Path(__file__).with_name("xla_draws.json")

#: (name, result shape, distribution, a, b): the types and shapes the expander treats apart.
CASES = [
    ("uniform_f32", "f32[5,3]", "rng_uniform", -2.0, 3.0),
    ("uniform_f64", "f64[7]", "rng_uniform", 0.25, 1.5),
    ("uniform_bf16", "bf16[9]", "rng_uniform", 0.0, 1.0),
    ("uniform_f16", "f16[2,3]", "rng_uniform", -1.0, 1.0),
    ("uniform_s32", "s32[6]", "rng_uniform", -7, 100),
    ("uniform_s32_wide", "s32[4]", "rng_uniform", -2000000000, 2000000000),
    ("uniform_u32", "u32[3]", "rng_uniform", 10, 20),
    ("uniform_s64", "s64[5]", "rng_uniform", -5, 1000000000000),
    ("uniform_u64", "u64[3,2]", "rng_uniform", 5, 1099511627776),
    ("normal_f32", "f32[5,3]", "rng_normal", 1.0, 2.0),
    ("normal_f32_even", "f32[3,4,2]", "rng_normal", 0.0, 1.0),
    ("normal_f64", "f64[3,7]", "rng_normal", -1.0, 0.5),
    ("normal_f32_scalar", "f32[]", "rng_normal", 0.0, 1.0),
    ("normal_bf16", "bf16[2,5,3]", "rng_normal", 0.0, 1.0),
]


def case_text(name: str, shape: str, distribution: str, a, b) -> str:
    dtype = shape.split("[")[0]
    return (f"HloModule {name}\nENTRY e {{\n  a = {dtype}[] constant({a})\n"
            f"  b = {dtype}[] constant({b})\n"
            f"  ROOT r = {shape} rng(a, b), distribution={distribution}\n}}\n")


def _child(dump: str) -> None:
    sys.path.insert(0, str(ROOT))
    import numpy as np
    from tests.conformance.xla_oracle import compile_with_xla

    draws = {}
    for name, shape, distribution, a, b in CASES:
        program = compile_with_xla(case_text(name, shape, distribution, a, b))
        as_json = np.float64 if shape.startswith(("f", "bf")) else object  # exact either way
        draws[name] = [np.asarray(program()[0]).astype(as_json).reshape(-1).tolist()
                       for _ in range(2)]
    for name in draws:
        after = next(Path(dump).glob(f"*.{name}.*after_rng-expander*")).read_text()
        key = int(re.search(r"u64\[\] constant\((\d+)\)\s*\n\s*%rng-get-and-update-state",
                            after).group(1))
        draws[name] = {"key": key, "draws": draws[name]}
    print(json.dumps(draws))


def main() -> int:
    with tempfile.TemporaryDirectory() as dump:
        env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={dump} "
                                          "--xla_dump_hlo_pass_re=rng-expander"}
        result = subprocess.run([sys.executable, __file__, "--child", dump], env=env,
                                capture_output=True, text=True, check=True)
    draws = json.loads(result.stdout.strip().splitlines()[-1])
    cases = [{"name": n, "shape": s, "distribution": d, "a": a, "b": b, **draws[n]}
             for n, s, d, a, b in CASES]
    import jaxlib

    lines = ",\n".join(json.dumps(case) for case in cases)
    OUT.write_text(f'{{"xla": "XLA:CPU of jaxlib {jaxlib.__version__}", "cases": [\n{lines}\n]}}\n')
    print(f"wrote {OUT} ({len(cases)} cases)")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2])
    else:
        sys.exit(main())
