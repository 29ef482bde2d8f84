"""The compiled module inside other frameworks: the PyTorch custom op (``torch_op``, with its
backward plan and op names) and JAX functions as torch ops (``from_jax``).
"""
