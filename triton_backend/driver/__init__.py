"""From a verified module to callables: ``compile_hlo`` (``module_compiler``) and running what it
returns (``module_runner``), compiling one fusion (``compiled_fusion``, ``single_op_fusion``),
and which ops and fusions the backend covers (``op_coverage``).
"""
