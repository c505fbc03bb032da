"""Generate a scripts/mutation.sh module's mutants without running any test (docs/testing.md).

    cd .mutation/MODULE && python ../../scripts/mutation_generate.py

mutmut 3's ``run`` generates the mutants, then runs the whole selection once for its statistics
before the first mutant.  Where the mutants are run by ``scripts/mutation_inproc.py`` on another
machine (more cores), only ``mutants/`` and its ``.meta`` files are needed: this writes them.
"""

from __future__ import annotations

import os

from mutmut import __main__ as mm


def main() -> int:
    """mutmut's own generation steps, in its order, with one process a core."""
    mm.set_mutant_under_test("mutant_generation")
    os.makedirs("mutants", exist_ok=True)
    mm.copy_src_dir()
    mm.copy_also_copy_files()
    mm.setup_source_paths()
    stats = mm.create_mutants(os.cpu_count() or 2)
    print(f"mutation_generate: {stats.mutated} files mutated, {stats.ignored} copied as they are")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
