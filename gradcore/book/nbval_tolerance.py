"""nbval with the book's reproducibility rules: ``pytest --nbval -p gradcore.book.nbval_tolerance``.

nbval re-executes every notebook and compares each cell's outputs with the committed ones,
character by character. This plugin keeps nbval as the runner (kernel, cell order, per-cell
reports, the sanitize file) and replaces only that comparison by
:func:`gradcore.book.reproducibility.compare_outputs`: text and integers exactly, decimals
within the tolerance their chapter declares for their kind. A failure names the notebook,
the cell, the number, the committed and the new value and the tolerance.

``gradcore check --exact`` runs nbval without this plugin: bit-exact, for refactoring on
the machine type that produced the notebooks. With ``GRADCORE_DRIFT_LOG=FILE`` every
decimal that moved (within its tolerance or not) is appended to FILE as a JSON line, so a
check on another float path is also a drift measurement (``gradcore drift report --log``).
"""

from __future__ import annotations

import json
import os

import nbval.plugin as _nbval

from . import reproducibility

#: nbval's version the cell class below was written against (its comparison hook is not public).
SUPPORTED_NBVAL = ("0.11",)


def compare_outputs(self, test, ref, skip_compare=None):
    """nbval's cell comparison, by :mod:`gradcore.book.reproducibility` (same signature and
    contract)."""
    notebook = self.parent.nb
    chapter = reproducibility.chapter_tolerance(notebook.metadata)
    tolerance = reproducibility.cell_tolerance(chapter, self.cell.metadata)
    drifts: list = []
    differences = reproducibility.compare_outputs(
        ref, test, tolerance, sanitize=self.sanitize, drifts=drifts
    )
    _log_drifts(self, drifts, differences)
    self.comparison_traceback = []
    if not differences:
        return True
    cc = self.colors
    self.comparison_traceback.append(
        cc.FAIL + f"{len(differences)} output(s) of {self.fspath.basename} cell {self.cell_num} do "
        "not reproduce (committed -> this run):" + cc.ENDC
    )
    self.comparison_traceback.extend(f"  {difference}" for difference in differences[:20])
    if len(differences) > 20:
        self.comparison_traceback.append(f"  ... and {len(differences) - 20} more")
    return False


def _log_drifts(cell, drifts: list, differences: list) -> None:
    path = os.environ.get("GRADCORE_DRIFT_LOG")
    if not path:
        return
    chapter = cell.fspath.purebasename
    records = [
        {
            "chapter": chapter,
            "cell": cell.cell_num,
            "where": d.where,
            "kind": d.kind,
            "stored": d.stored,
            "new": d.new,
            "size": d.size,
            "within": True,
        }
        for d in drifts
    ]
    records += [
        {
            "chapter": chapter,
            "cell": cell.cell_num,
            "where": d.where,
            "kind": d.kind,
            "stored": d.stored,
            "new": d.new,
            "allowed": d.allowed,
            "within": False,
        }
        for d in differences
    ]
    with open(path, "a", encoding="utf-8") as log:
        log.writelines(json.dumps(record) + "\n" for record in records)


def pytest_configure(config):
    import nbval

    if not nbval.__version__.startswith(SUPPORTED_NBVAL):
        raise RuntimeError(
            f"gradcore.book.nbval_tolerance supports nbval {SUPPORTED_NBVAL}, found "
            f"{nbval.__version__}; pin nbval as constraints.txt does"
        )
    # nbval has no hook for its comparison, and its cell class calls itself by its module-level
    # name (so a subclass put in its place would recurse): replace the one method instead.
    _nbval.IPyNbCell.compare_outputs = compare_outputs
