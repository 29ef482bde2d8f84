"""Module rewrites that keep the meaning: canonicalization (inlining, no-op removal, constant
folding) and the expansion of complex arithmetic into pairs of floats; and, on request only,
TF32 for f32 dots (``dot_algorithm``).
"""
