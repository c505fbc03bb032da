"""SYNTHETIC traces, built from code and never measured.

``export``: nsys-schema SQLite exports with nsys's real table and column names,
whose answers are known by construction (the tests, the benchmarks' large exports).
``demo``: the demonstration runs the quickstart and the dashboard show, from a
stated model of an offloaded training step.
"""
