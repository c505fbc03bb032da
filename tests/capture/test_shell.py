"""``capture.shell.output_of``: a short command's stripped output, None when it cannot answer."""

from __future__ import annotations

import sys

from profiler.capture.shell import output_of


def test_the_output_of_a_command_that_ends_well_and_none_otherwise(tmp_path):
    assert output_of([sys.executable, "-c", "print('  yes  ')"], timeout=30) == "yes"
    assert output_of([sys.executable, "-c", "print('no'); raise SystemExit(3)"], timeout=30) is None
    assert output_of([str(tmp_path / "no-such-program")], timeout=30) is None
    assert output_of([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5) is None
