"""JAX programs written for several devices (``jax.sharding``, ``shard_map``, ``psum``,
``all_gather``, ``ppermute``, ``psum_scatter``, ``all_to_all``), and XLA running them.

``python -m tests.conformance.sharded_programs`` writes ``tests/data/hlo_sharded``:
``NAME.Ndev.before.hlo`` (``jax.jit(f).lower(...).as_text(dialect="hlo")``: global shapes,
sharding custom calls and Shardy attributes) and ``NAME.Ndev.after.hlo`` (``.compile()``: for
N > 1 one program per device, partitioned by XLA's SPMD partitioner, ``num_partitions=N``).
``python -m tests.conformance.sharded_programs --oracle NAME N SEED OUT.npz`` runs the case
with XLA on N CPU devices and saves each device's shard of every input (``in{d}_{k}``) and
output (``out{d}_{k}``): the reference a multi-device run is compared with.

jax sees several CPU devices only when ``XLA_FLAGS=--xla_force_host_platform_device_count``
is set before it is imported, so both modes run as ``__main__`` in their own process
(:func:`xla_shards` starts one); importing this module imports no jax.

>>> sorted(CASES)
['collectives', 'dp_train_step', 'sharding_constraint']
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np

OUT_DIR = pathlib.Path(__file__).resolve().parent.parent / "data" / "hlo_sharded"
MAX_DEVICES = 4
ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def _mesh(n: int):
    import jax

    return jax.make_mesh((n,), ("d",), axis_types=(jax.sharding.AxisType.Auto,),
                         devices=jax.devices()[:n])


def _sharding_constraint(n: int, rng: np.random.Generator):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = _mesh(n)

    def f(x, w):
        y = jnp.tanh(x @ w)
        y = jax.lax.with_sharding_constraint(y, NamedSharding(mesh, P(None, "d")))
        return y.sum(0), y * 2.0

    args = (rng.standard_normal((4, 8), np.float32), rng.standard_normal((8, 4), np.float32))
    shardings = (NamedSharding(mesh, P("d")), NamedSharding(mesh, P()))
    return jax.jit(f, in_shardings=shardings), args, shardings


def _collectives(n: int, rng: np.random.Generator):
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = _mesh(n)

    def body(x):
        total = jax.lax.psum(x * 2.0, "d")
        gathered = jax.lax.all_gather(x, "d", tiled=True)
        shifted = jax.lax.ppermute(x, "d", [(i, (i + 1) % n) for i in range(n)])
        scattered = jax.lax.psum_scatter(gathered, "d", tiled=True)
        swapped = jax.lax.all_to_all(gathered, "d", 0, 0, tiled=True)
        return total, gathered.sum(0, keepdims=True), shifted, scattered, swapped

    spec = P("d")
    f = jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=(spec,) * 5)
    args = (rng.standard_normal((2 * n, 4), np.float32),)
    return jax.jit(f), args, (NamedSharding(mesh, spec),)


def _transformer_loss(params, x, y):
    import jax
    import jax.numpy as jnp

    wq, wk, wv, w1, w2 = params
    q, k, v = x @ wq, x @ wk, x @ wv
    scores = jnp.einsum("btd,bsd->bts", q, k) / jnp.sqrt(jnp.float32(q.shape[-1]))
    h = x + jax.nn.softmax(scores, axis=-1) @ v
    h = h + jax.nn.gelu(h @ w1) @ w2
    return jnp.mean((h - y) ** 2)


def _dp_train_step(n: int, rng: np.random.Generator):
    """One SGD step of a one-block transformer, data parallel: the batch is split over the
    devices, the gradients are averaged with ``pmean`` (an all-reduce)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = _mesh(n)

    def body(params, x, y):
        loss, grads = jax.value_and_grad(_transformer_loss)(params, x, y)
        grads = jax.lax.pmean(grads, "d")
        new = tuple(p - 0.1 * g for p, g in zip(params, grads))
        return new, jax.lax.pmean(loss, "d")

    d = 8
    params = tuple(rng.standard_normal(s, np.float32) * 0.3
                   for s in ((d, d), (d, d), (d, d), (d, 16), (16, d)))
    x = rng.standard_normal((2 * n, 4, d), np.float32)
    y = rng.standard_normal((2 * n, 4, d), np.float32)
    specs = ((P(),) * 5, P("d"), P("d"))
    f = jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=((P(),) * 5, P()))
    shardings = ((NamedSharding(mesh, P()),) * 5, NamedSharding(mesh, P("d")),
                 NamedSharding(mesh, P("d")))
    return jax.jit(f), (params, x, y), shardings


#: name -> (builder(n, rng) -> (jitted, args, shardings), device counts in the corpus).
CASES = {
    "collectives": (_collectives, (1, 2, 4)),
    "dp_train_step": (_dp_train_step, (1, 2)),
    "sharding_constraint": (_sharding_constraint, (1, 2)),
}


def corpus_files(name: str, n: int) -> tuple[pathlib.Path, pathlib.Path]:
    """``NAME.Ndev.before.hlo`` and ``NAME.Ndev.after.hlo``."""
    return OUT_DIR / f"{name}.{n}dev.before.hlo", OUT_DIR / f"{name}.{n}dev.after.hlo"


def _placed(args, shardings):
    import jax

    return jax.tree.map(lambda a, s: jax.device_put(a, s), args, shardings)


def _write_corpus() -> None:
    rng = np.random.default_rng(0)
    for name, (build, counts) in CASES.items():
        for n in counts:
            jitted, args, shardings = build(n, rng)
            lowered = jitted.lower(*_placed(args, shardings))
            before, after = corpus_files(name, n)
            before.write_text(lowered.as_text(dialect="hlo"))
            after.write_text(lowered.compile().as_text())


def _device_shards(tree) -> list[list[np.ndarray]]:
    """Per device (by id), the shard of each leaf of ``tree``, flattened depth first."""
    import jax

    leaves = jax.tree.leaves(tree)
    n = len(leaves[0].sharding.device_set)
    out: list[list[np.ndarray]] = [[] for _ in range(n)]
    for leaf in leaves:
        for shard in leaf.addressable_shards:
            out[shard.device.id].append(np.asarray(shard.data))
    return out


def _oracle(name: str, n: int, seed: int, path: str) -> None:
    build, _ = CASES[name]
    jitted, args, shardings = build(n, np.random.default_rng(seed))
    placed = _placed(args, shardings)
    arrays = {}
    for prefix, tree in (("in", placed), ("out", jitted(*placed))):
        for d, leaves in enumerate(_device_shards(tree)):
            arrays.update({f"{prefix}{d}_{k}": a for k, a in enumerate(leaves)})
    np.savez(path, **arrays)


def xla_shards(name: str, n: int, seed: int, tmp: pathlib.Path
               ) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]]]:
    """Run case ``name`` with XLA on ``n`` CPU devices (in a child process): per device, its
    input shards and its output shards, in parameter and result order."""
    path = tmp / f"{name}.{n}.{seed}.npz"
    subprocess.run([sys.executable, "-m", "tests.conformance.sharded_programs", "--oracle",
                    name, str(n), str(seed), str(path)], check=True, cwd=ROOT, timeout=300)
    data = np.load(path)

    def per_device(prefix: str) -> list[list[np.ndarray]]:
        return [[data[f"{prefix}{d}_{k}"] for k in range(len(data.files))
                 if f"{prefix}{d}_{k}" in data.files] for d in range(n)]

    return per_device("in"), per_device("out")


if __name__ == "__main__":
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={MAX_DEVICES}")
    if sys.argv[1:2] == ["--oracle"]:
        _oracle(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        _write_corpus()
