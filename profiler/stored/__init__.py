"""What a stored run is, below the analysis that reads it: its folder's layout (``folder``, the only
reader and writer of manifests, traces and compiled steps), its document read back typed
(``summary``), and why a run has no trace (``no_trace``, from nsys's output as ``console`` tells it
apart from the script's).  Standard library and ``profiler.conventions`` only, so that capture runs
where polars is not installed.
"""
