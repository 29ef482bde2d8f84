"""The tiled merge judges what bytes cannot see: a merged kernel whose output tile would
spill registers, and reductions side by side in a kernel of few blocks, each long enough to
be split among programs alone (only a lone outer reduction is split).  A batch norm over
batch and space (written as XLA's ``BatchNormExpander`` writes it) is where both bite:
cheapest in bytes as one kernel whose block holds every reduced element of 32 features (a
million values), or one whose two sums run on one SM."""
from __future__ import annotations

import math

import pytest

from fusion.text.parser import parse_hlo
from tests.fusion.test_batch_norm import training_text
from fusion.transforms.plain_ops import plain_ops
from tiling.fusion_pass.decisions import outer_reduces
from tiling.fusion_pass.priority_fusion import fuse_module
from tiling.policy.candidates import report_for
from tiling.policy.limits import MAX_MERGED_OUTPUT_TILE, MIN_SPLIT_ELEMENTS, NUM_SMS
from tiling.symbolic.tiled_fusion import analyze_computation_tiling, next_power_of_two


@pytest.mark.parametrize("dims, feature", [((32, 28, 28, 64), 3), ((32, 64, 28, 28), 1)])
def test_no_fused_kernel_holds_a_spilling_tile_or_unsplit_side_by_side_sums(dims, feature):
    result = fuse_module(plain_ops(parse_hlo(training_text(dims, feature))))
    module = result.module
    fusions = [i for i in module.entry if i.opcode == "fusion"]
    assert 1 <= len(fusions) <= 3, result.explain()
    for fusion in fusions:
        fused = module.computation(fusion.attr("calls"))
        default = report_for(analyze_computation_tiling(fused, fused.name)).default
        if default is None:
            continue  # tiled by the kernel planner (its own limits)
        held = math.prod(next_power_of_two(t) for t in default.tile_sizes)
        assert held <= MAX_MERGED_OUTPUT_TILE, (fusion.name, default.tile_sizes)
        members = tuple(i.name for i in fused.instructions)
        outer = outer_reduces(fused, members)
        longest = max((fused.instruction(fused.instruction(r).operands[0]).shape.num_elements
                       for r in outer), default=0)
        if 2 * default.num_blocks < NUM_SMS and longest // default.num_blocks >= \
                2 * MIN_SPLIT_ELEMENTS:
            assert len(outer) <= 1, (fusion.name, default.tile_sizes)


def test_the_refusals_say_why():
    explain = fuse_module(plain_ops(parse_hlo(training_text((32, 28, 28, 64), 3)))).explain()
    assert "a block keeps in registers" in explain
