"""mutmut 3 does not mutate a function with a decorator (it runs at definition time): in the mutation
copy only, each ``@rule("id")`` line above a ``def`` becomes a comment and the registration moves to the
file's end (``name = rule("id")(name)``, in the same order), so that the rules' bodies are mutated.

    python mutation_undecorate.py FILE...    # rewrites each FILE in place (scripts/mutation.sh, findings_rules)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def undecorate(text: str) -> str:
    lines = text.split("\n")
    moved = []
    for i, line in enumerate(lines):
        m = re.fullmatch(r"@rule\((\"[^\"]+\")\)", line)
        if m and i + 1 < len(lines):
            name = re.match(r"def (\w+)\(", lines[i + 1])
            if name:
                moved.append(f"{name.group(1)} = rule({m.group(1)})({name.group(1)})")
                lines[i] = f"# {line}: registered at the end of the file (scripts/mutation_undecorate.py)"
    return "\n".join(lines).rstrip("\n") + "\n\n" + "\n".join(moved) + "\n" if moved else text


def main() -> int:
    for path in map(Path, sys.argv[1:]):
        path.write_text(undecorate(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
