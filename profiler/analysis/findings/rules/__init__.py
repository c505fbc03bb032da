"""The rules, registered in the order they are reported (within a severity)."""

from profiler.analysis.findings.rules import copies, kernels, schedule, steps  # noqa: F401
