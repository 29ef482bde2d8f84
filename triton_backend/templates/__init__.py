"""Kernel templates for the fusions the index-expression emitter does not cover: dot, sort,
scatter."""
