"""The mechanism of tiling: XLA's symbolic tile analysis, with no preference among tilings.

* ``symbolic_tile``: the tile of one indexing map (offsets, sizes and strides as functions of
  the output tile sizes) with the constraints under which it is exact, or "not tileable";
* ``tile_constraints``: those constraints (conjunctions of divisibility and range facts);
* ``tiled_fusion``: the tiled instruction graph of a fusion, one symbolic tile per
  instruction and path, instantiated at concrete tile sizes.

Which tilings are allowed and which one to use is the policy's (``tiling.policy``); nothing
here imports it.
"""
