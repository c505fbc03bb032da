"""``python -m dashboards [paths...]``: the same as ``profile-step dashboard``."""

import sys

from profiler.cli import main

if __name__ == "__main__":
    sys.exit(main(["dashboard", *sys.argv[1:]]))
