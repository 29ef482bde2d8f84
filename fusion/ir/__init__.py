"""The HLO IR as frozen dataclasses: modules, computations, instructions, shapes, layouts,
element types, attributes, and the walks over them (call graph, dependency order).
"""
