"""Does the output check still catch a real regression? Break a chapter on purpose and see.

    python tests/regressions.py [NAME ...]        (minutes: each break re-executes one chapter)

Each break edits the library in a throwaway clone of this repository (the committed
notebooks stay as they are), re-executes one notebook under ``pytest --nbval -p
gradcore.book.nbval_tolerance`` exactly as ``gradcore check`` does, and passes when the check
fails and names a number of the cell the break changes. Not part of ``make test``: it
re-executes chapters; run it after changing a tolerance (README, "Testing").
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: name -> (notebook, file to edit, text to replace, replacement, what it stands for)
BREAKS = {
    "half-iterations": ("dlg", "gradcore/papers.py", '"ci": {"threads": 1, "photo_iterations": 200,',
                        '"ci": {"threads": 1, "photo_iterations": 100,', "DLG on LeNet photos with half its L-BFGS steps"),
    "weak-defense": ("censor", "gradcore/papers.py", '"noise 0.1": {"defense": "noise", "sigma": 0.1}',
                     '"noise 0.1": {"defense": "noise", "sigma": 0.01}', "the noise defense at a tenth of its strength"),
    "wrong-paper-number": ("dlg", "gradcore/papers.py", '"label_accuracy": {"MNIST": (89.9, 100.0)',
                           '"label_accuracy": {"MNIST": (88.9, 100.0)', "a paper's number mistyped (89.9 -> 88.9)"),
}


def run(name: str) -> bool:
    notebook, path, old, new, meaning = BREAKS[name]
    with tempfile.TemporaryDirectory(prefix="gradcore-break-") as folder:
        clone = Path(folder) / "repo"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        target = clone / path
        text = target.read_text()
        if text.count(old) != 1:
            print(f"{name}: the text to break was not found once in {path}; update tests/regressions.py")
            return False
        target.write_text(text.replace(old, new))
        env = {**os.environ, "PYTHONPATH": str(clone), "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
        env.pop("MPLBACKEND", None)
        cmd = [sys.executable, "-m", "pytest", "--nbval", f"notebooks/{notebook}.ipynb", "--nbval-current-env",
               "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "-p", "no:cacheprovider", "-p",
               "gradcore.book.nbval_tolerance", "-q"]
        result = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True)
    named = re.findall(r"^ +(.*became.*)$", result.stdout, re.M)
    caught = result.returncode != 0 and bool(named)
    print(f"{'caught' if caught else 'MISSED'}: {name} ({meaning}) in notebooks/{notebook}.ipynb")
    for line in named[:6]:
        print(f"    {line}")
    if not caught:
        print(result.stdout[-3000:])
    return caught


def main(names: list[str]) -> int:
    unknown = sorted(set(names) - set(BREAKS))
    if unknown:
        print(f"unknown break(s) {', '.join(unknown)}; known: {', '.join(BREAKS)}")
        return 2
    results = [run(name) for name in names or BREAKS]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
