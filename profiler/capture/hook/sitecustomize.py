"""profile-step's start-up hook (``profiler.capture.startup``), first on the child's PYTHONPATH.

Runs any other ``sitecustomize`` on the path first, as Python would have, then
installs the hook.  Nothing here may break the user's script.
"""


def _chain() -> None:
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    try:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception as exc:  # what site.py does with a failing sitecustomize
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}", file=sys.stderr)


def _install() -> None:
    try:
        from profiler.capture import startup

        startup.install()
    except Exception:
        pass


def _main() -> None:
    import contextlib

    with contextlib.suppress(Exception):
        _chain()
    _install()


_main()
