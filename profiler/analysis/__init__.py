"""Pure functions over the loader's polars frames: intervals and the METRICS.md numbers."""
