"""The rules; the order of registration breaks ties of cost and severity in the output: the
exposed copies first (the symptom), then the rules that name a cause of it."""

from profiler.analysis.findings.rules import exposed  # noqa: F401, I001  (registered first)
from profiler.analysis.findings.rules import capture, copies, kernels, schedule, steps  # noqa: F401
