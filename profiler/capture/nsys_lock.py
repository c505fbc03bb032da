"""One ``nsys profile`` at a time on a host, when asked.

nsys 2024.2.3 beside another nsys of the same user can lose its report (its importer crashing,
"Generated:" with no file, "Local Endpoint is not available" before the script starts); each is
retried once (``stored.no_trace``). Where several profile-step processes share a host and take
turns anyway (a test suite on several workers, policies profiled by separate jobs), setting
``PROFILE_STEP_NSYS_LOCK`` to a file makes each hold a lock on it while its nsys profiles. Never
for the ranks of one job: they must run at the same time.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

ENV = "PROFILE_STEP_NSYS_LOCK"


@contextmanager
def held() -> Iterator[None]:
    """The lock named by ``PROFILE_STEP_NSYS_LOCK`` held for the block (nothing when it is unset)."""
    path = os.environ.get(ENV)
    if not path:
        yield
        return
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
