"""The mechanism of lowering one tiled fusion: the index-expression ``value_emitter`` the op rules
write into, addressing and index arithmetic, operand indices, packed (sub-byte and tiled)
access, identifiers, and the ``tl`` types of HLO element types.
"""
