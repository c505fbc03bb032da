"""A run: its folder (``folder``), how runs are found (``discover``), its one typed result
(``result``) and the results database (``store``).

Submodules are imported on their own: ``folder`` needs only the standard library, so that
capture, which writes run folders, runs where polars is not installed.
"""
