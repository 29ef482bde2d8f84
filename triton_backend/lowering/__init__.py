"""Lowering of one tiled fusion to the text of a Triton kernel file (index-expression emitter).

``compile_fusion`` in ``triton_backend.driver.compiled_fusion`` is the entry point; the modules
here render the pieces of one kernel file, with every op's rule in ``lowering.rules``.
"""
