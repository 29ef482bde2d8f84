"""Lowering of tiled fusions to ``@triton.jit`` kernels, launching, caching, the CLI.

Imports torch and triton lazily: the CLI's analysis subcommands must start without them.
"""
