"""``@triton.jit`` helpers that generated kernels import (XLA's math, bit packing)."""
