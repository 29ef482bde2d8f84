"""``fusion-compile cache info|clear|prune [--max-size SIZE]``: the kernel files and the
compiled-module plans that name them, as one cache.

``info`` prints both directories (kernel files: ``$FUSION_KERNEL_CACHE_DIR``, else
``$XDG_CACHE_HOME/hlo-triton-fusion/kernels``; plans: ``$FUSION_MODULE_CACHE_DIR``, else
``modules`` inside it), the files and bytes of each and the size limit on both together
(``$FUSION_KERNEL_CACHE_MAX_BYTES``, default 512M); ``clear`` removes every file of the project
from both, plans first; ``prune`` removes the least recently used ones, kernel files and plans
alike, until the cache fits the limit (or ``--max-size``), and every plan naming a kernel
file no longer there.  The cache prunes itself to the limit as it grows, too.  Never imports
torch or triton.
"""
from __future__ import annotations

import argparse

from fusion.errors import BadArgumentError
from triton_backend.cli.json_output import emit
from triton_backend.runtime.cache_pruning import (
    cache_info,
    clear_cache,
    max_cache_bytes,
    parse_size,
    prune_cache,
)
from triton_backend.runtime.cache_files import default_cache_dir

HELP = "show, clear or prune the kernel files and compiled-module plans (LRU to a size limit)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("info", "clear", "prune"),
                        help="info: location, files, bytes, limit; clear: remove every entry; "
                             "prune: remove least recently used entries down to the limit")
    parser.add_argument("--max-size", metavar="SIZE",
                        help="the limit for prune, e.g. 200M or 1G (default: "
                             "$FUSION_KERNEL_CACHE_MAX_BYTES, else 512M)")


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def run(args: argparse.Namespace) -> int:
    limit = None
    if args.max_size is not None:
        if args.action != "prune":
            raise BadArgumentError("--max-size is an option of prune", where="--max-size")
        try:
            limit = parse_size(args.max_size)
        except ValueError as err:
            raise BadArgumentError(str(err), where="--max-size") from None
    directory = default_cache_dir()
    limit = max_cache_bytes() if limit is None else limit
    removed = (0, 0)
    if args.action == "clear":
        removed = clear_cache(directory)
    elif args.action == "prune":
        removed = prune_cache(directory, limit)
    info = cache_info(directory, limit)
    if args.json:
        emit("cache", {"action": args.action, **info.to_json(), "removed_files": removed[0],
                       "freed_bytes": removed[1]})
        return 0
    if args.action != "info":
        print(f"removed {removed[0]} file(s), {_mb(removed[1])}")
    print(f"kernel cache: {info.directory}")
    print(f"  {info.files} file(s), {_mb(info.bytes)} of a {_mb(info.max_bytes)} limit")
    print(f"  kernel files: {info.kernel_files}, {_mb(info.kernel_bytes)}")
    print(f"  module plans: {info.plans}, {_mb(info.plan_bytes)} in {info.plan_directory}")
    return 0
