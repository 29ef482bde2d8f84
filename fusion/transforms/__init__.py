"""Module rewrites that keep the meaning: canonicalization (inlining, no-op removal, constant
folding), the expansion of complex arithmetic into pairs of floats, and long scans whose
result its order changes as XLA:CPU's tree of short ones (``scan_tree``, ``scan_inits``);
and, on request only, TF32 for f32 dots (``dot_algorithm``).
"""
