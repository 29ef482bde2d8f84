"""The policy of tiling: which output tilings our Triton backend may run, and which one it uses.

* ``limits``: every limit and tuning constant of the choice, once;
* ``devices``: the datasheet numbers of the GPUs we know (the default is the H100 SXM);
* ``roofline``: seconds of elementwise work and of memory traffic on a device (compute and
  memory rooflines), for fusion decisions that trade recomputation against bytes;
* ``verdict``: a typed legality verdict, ``Illegal(kind, message)``;
* ``legality``: the rules a tiling must pass (``check_tiling``);
* ``costs``: bytes, flops and coalescing of one block;
* ``candidates``: every tiling of a fusion, legal ones ranked, the default and why;
* ``choice``: ``choose_tiling``, the one function that picks a fusion's tiling, used by the
  fusion pass's tile check, the ``tile`` command, ``compile`` and the kernel planner.

The mechanism it judges is ``tiling.symbolic`` (XLA's symbolic tile analysis).
"""
