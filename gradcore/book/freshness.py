"""Is every committed notebook its chapter's source, executed? And the declared tolerances copied
in."""

from __future__ import annotations

import json
from pathlib import Path

from .layout import INJECTED_TAG, PipelineError, chapters, first_line, read_source, tags
from .notebooks import write_notebook
from .status import RESULTS_PAGE, results_page

# -------------------------------------------------------------------------------------- freshness


def _cell_key(cell) -> tuple:
    tolerance = json.dumps(cell.get("metadata", {}).get("tolerance"), sort_keys=True)
    return cell.cell_type, cell.source.rstrip("\n"), tuple(sorted(tags(cell))), tolerance


def freshness(root) -> list[str]:
    """Problems that make an executed notebook differ from its chapter source (empty if fresh).

    Every cell counts (code, prose and tags): nbval re-runs the code of the .ipynb and the book
    publishes the .ipynb, so a source edit that was never executed would go unnoticed otherwise.
    """
    import nbformat

    root = Path(root)
    problems = []
    for name, src in chapters(root).items():
        path = root / "notebooks" / f"{name}.ipynb"
        rerun = f"run `gradcore run {name}`"
        if not path.exists():
            problems.append(f"{name}: {path.relative_to(root)} is missing; {rerun}")
            continue
        executed = nbformat.read(path, as_version=4)
        injected = [i for i, c in enumerate(executed.cells) if INJECTED_TAG in tags(c)]
        if injected:
            params = executed.metadata.get("papermill", {}).get("parameters", {})
            given = ", ".join(f"{k}={v!r}" for k, v in params.items())
            problems.append(
                f"{name}: {path.relative_to(root)} was executed with non-default parameters "
                f"({given or 'see cell ' + str(injected[0])}); "
                f"CI checks the ci profile with default parameters: {rerun}"
            )
            continue
        source = read_source(src)
        declared = (source.metadata.get("gradcore") or {}).get("tolerance")
        if declared != (executed.metadata.get("gradcore") or {}).get("tolerance"):
            problems.append(
                f"{name}: the output tolerance in {src.relative_to(root)}'s front matter differs "
                f"from {path.relative_to(root)}'s; {rerun}"
            )
            continue
        source_cells = [_cell_key(c) for c in source.cells]
        executed_cells = [_cell_key(c) for c in executed.cells]
        for i, (a, b) in enumerate(zip(source_cells, executed_cells)):
            if a != b:
                what = a[0] if a[0] == b[0] else f"{a[0]} in the source, {b[0]} in the notebook"
                detail = (
                    f"source has `{first_line(a[1])}`"
                    if a[:2] != b[:2]
                    else "tags differ"
                    if a[2] != b[2]
                    else "tolerance differs"
                )
                problems.append(
                    f"{name}: cell {i} ({what}) differs from {src.relative_to(root)} ({detail}); "
                    f"{rerun}"
                )
                break
        else:
            if len(source_cells) != len(executed_cells):
                problems.append(
                    f"{name}: {src.relative_to(root)} has {len(source_cells)} cells, "
                    f"{path.relative_to(root)} has {len(executed_cells)}; {rerun}"
                )
    page = root / RESULTS_PAGE
    if (root / "_toc.yml").exists() and (
        not page.exists() or page.read_text() != results_page(root)
    ):
        problems.append(
            f"{RESULTS_PAGE} does not match the notebooks' claims tables: run `gradcore results`"
        )
    return problems


def sync_tolerances(root) -> list[str]:
    """Copy each chapter's declared output tolerances into its executed notebook.

    Tolerances configure the check, not the outputs, so a tolerance changed after a drift
    measurement needs no re-execution: the chapter's front matter (``gradcore: tolerance:``)
    and its cells' ``tolerance`` options are written into ``notebooks/NAME.ipynb`` as they
    are, outputs untouched. Returns the notebooks changed. A notebook whose cells no longer
    match its source is left alone and named in the error raised once the others are done
    (re-execute it instead).
    """
    import nbformat

    root = Path(root)
    changed, stale = [], []
    for name, src in chapters(root).items():
        path = root / "notebooks" / f"{name}.ipynb"
        if not path.exists():
            continue
        source, executed = read_source(src), nbformat.read(path, as_version=4)
        strip = lambda cell: _cell_key(cell)[:3]  # noqa: E731 - everything but the tolerance
        if [strip(c) for c in source.cells] != [strip(c) for c in executed.cells]:
            stale.append(
                f"{name}: {path.relative_to(root)} does not match {src.relative_to(root)} beyond "
                f"tolerances; run `gradcore run {name}`"
            )
            continue
        before = nbformat.writes(executed)
        declared = (source.metadata.get("gradcore") or {}).get("tolerance")
        executed.metadata.setdefault("gradcore", {}).pop("tolerance", None)
        if declared is not None:
            executed.metadata["gradcore"]["tolerance"] = declared
        for mine, theirs in zip(source.cells, executed.cells):
            theirs.metadata.pop("tolerance", None)
            if "tolerance" in mine.metadata:
                theirs.metadata["tolerance"] = mine.metadata["tolerance"]
        if nbformat.writes(executed) != before:
            write_notebook(executed, path)
            changed.append(str(path.relative_to(root)))
    if stale:
        done = f" (updated: {', '.join(changed)})" if changed else ""
        raise PipelineError("; ".join(stale) + done)
    return changed
