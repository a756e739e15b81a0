"""What every benchmark script shares: writing its JSON result atomically.

The scripts run as ``python bench/NAME.py``, so this folder is on ``sys.path``.
"""

from __future__ import annotations

import json
from pathlib import Path

from gradcore.book.notebooks import write_text_atomically


def write_json(path: Path, result: dict) -> None:
    """Write ``result`` to ``path`` atomically: an interrupted run never leaves half a file."""
    write_text_atomically(path, json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
