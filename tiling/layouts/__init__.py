"""XLA's tiled layouts as index maps: ``tiled_layout`` (logical index to physical offset, the
steps of a tiled buffer), ``packing`` (host-side packing of tiled buffers, and back), and two
seed ports kept beside them, each checked by its own tests against its seed's worked examples:
``tpu_formats`` (the tiled formats XLA/TPU picks) and ``nested_layout`` (IREE's
``NestedLayoutAttr``).  No compile path imports those two; they stay with the layout math they
are written in.
"""
