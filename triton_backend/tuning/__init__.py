"""Choosing and keeping launch settings: autotuning, cost model, device table, tuning database,
kernel cache."""
