"""From a verified module to callables: ``compile_hlo``, compiled fusions, the torch op."""
