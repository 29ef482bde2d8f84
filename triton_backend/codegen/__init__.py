"""Code generation of Triton kernels for HLO fusions (index-expression emitter).

``compile_fusion`` in ``triton_backend.compiled_fusion`` is the entry point; the modules here
render the pieces of one kernel file.
"""
