"""Choosing launch settings: autotuning sweeps (over the driver's compiled fusions) and the cost
model.  What they keep lives in ``runtime`` (the tuning database, the device table).
"""
