"""What every benchmark script shares: writing its JSON result atomically.

The scripts run as ``python bench/NAME.py``, so this folder is on ``sys.path``.
"""

from __future__ import annotations

import json
from pathlib import Path


def write_json(path: Path, result: dict) -> None:
    """Write ``result`` to ``path`` through a ``.tmp`` file renamed when complete,
    so an interrupted run never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(json.dumps(result, indent=2) + "\n")
    temporary.replace(path)
    print(f"wrote {path}")
