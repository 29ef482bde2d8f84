"""Sort fusions: ``driver`` (the comparator's order probed against NumPy, compile) and ``kernel``
(a bitonic sort template).
"""
