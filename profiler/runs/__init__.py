"""Runs, above the analysis: how runs are found (``discover``), a run's one typed result
(``result``), the verdict over runs (``verdict``), the catalog of public traces (``catalog``) and
the results database (``store``).  What a stored run is (its folder, its summary, why it has no
trace) is ``profiler.stored``, below the analysis.
"""
