"""What a fusion computes, as XLA's GPU backend asks it: the hero and the emitter kind, reduction
kinds, in-place updates, the computation partitioner, which ops are library calls, and what a
collective is on one device.
"""
