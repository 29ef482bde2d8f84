"""Lowering of one tiled fusion to the text of a Triton kernel file.

Folders, in import order: ``emitter/`` (the index-expression emitter and its addressing), then
``rules/`` (every op's rule, written against the emitter); this folder's own modules compose
them: ``kernel_plan`` (the launch plan of a tiling), ``kernel_file`` (the whole file, wiring
the rule table into the emitter), ``host_template`` (the file's host side) and
``numerics_policy``.  ``compile_fusion`` in ``triton_backend.driver.compiled_fusion`` is the
entry point.
"""
