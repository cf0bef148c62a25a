"""Print the shell block of a doc that follows the marker `<!-- ci: NAME -->`, so that CI runs
the commands a user reads, not a second copy of them (.ci/run sources the output).

Usage: python3 scripts/doc_block.py DOC NAME
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def doc_block(doc: Path, name: str) -> str:
    """The body of the ```bash block right after `<!-- ci: name -->` in doc."""
    found = re.search(rf"^<!-- ci: {re.escape(name)} -->\n```bash\n(.*?)^```$", doc.read_text(),
                      re.S | re.M)
    if found is None:
        raise SystemExit(f"{doc}: no ```bash block after <!-- ci: {name} -->")
    return found.group(1)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python3 scripts/doc_block.py DOC NAME")
    sys.stdout.write(doc_block(Path(sys.argv[1]), sys.argv[2]))
