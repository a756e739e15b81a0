"""Tests of gradcore.book.status: the Status page's records and the front page's results."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

from gradcore.book import freshness, notebooks, status

from .tiny import write_fake_executed


def test_results_page_counts_the_claims_the_notebooks_show_and_goes_stale(repo):
    from gradcore.claims import Claims

    (repo / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: notebooks/tiny\n")
    path = write_fake_executed(repo)
    notebook = nbformat.read(path, as_version=4)
    table = Claims("tiny claims")
    table.at_least("holds", "p", 2.0, 1.0)
    table.at_least("holds too", "p", 3.0, 1.0)
    table.not_reproduced("needs data | not here", 5.0, "n/a", "no such data on disk")
    notebook.cells[-1].outputs = [nbformat.v4.new_output("display_data", data=table._repr_mimebundle_())]
    notebooks.write_notebook(notebook, path)
    assert any("results.md" in problem for problem in freshness.freshness(repo))  # never written: stale
    status.write_results_page(repo)
    page = (repo / "notebooks" / "results.md").read_text()
    assert "| [A tiny chapter](../notebooks/tiny.ipynb) | 3 | 2 | 1 | 0 | 0 |" in page
    assert "needs data \\| not here" in page and "no such data on disk" in page
    assert freshness.freshness(repo) == []
    table.rows.pop()
    notebook.cells[-1].outputs = [nbformat.v4.new_output("display_data", data=table._repr_mimebundle_())]
    notebooks.write_notebook(notebook, path)
    assert any("results.md" in problem for problem in freshness.freshness(repo))


def _record_one(root, number):
    status.record(root, f"chapter-{number}", "ci", {"profile": "ci"}, 1.0, Path(root) / "notebooks" / f"chapter-{number}.ipynb")


def test_status_records_from_parallel_runs_are_all_kept(tmp_path):
    import multiprocessing

    (tmp_path / "notebooks").mkdir()
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_record_one, args=(str(tmp_path), number)) for number in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    status = json.loads((tmp_path / "notebooks" / "status.json").read_text())
    assert sorted(status) == sorted(f"chapter-{number}" for number in range(8))


def test_front_page_repeats_the_deployment_chapters_recorded_findings(repo, monkeypatch):
    (repo / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: notebooks/tiny\n")
    path = write_fake_executed(repo)
    notebook = nbformat.read(path, as_version=4)
    assert status.recorded_findings(path) is None
    monkeypatch.setattr(status, "DEPLOYMENT_CHAPTERS", ("tiny", "absent"))
    assert "What protects" not in status.results_page(repo)  # nothing recorded: no section, no typed text
    # What myst-nb's glue(name, Markdown(...), display=False) leaves in the notebook.
    record = {"application/papermill.record/text/markdown": "**2 of 2 checked claims hold.**\n\n- x: 1.5 (holds)",
              "application/papermill.record/text/plain": "<IPython.core.display.Markdown object>"}
    notebook.cells[-1].outputs = [nbformat.v4.new_output(
        "display_data", data=record, metadata={"scrapbook": {"name": "findings", "mime_prefix": "application/papermill.record/"}})]
    notebooks.write_notebook(notebook, path)
    assert status.recorded_findings(path).startswith("**2 of 2 checked claims hold.**")
    page = status.results_page(repo)
    assert "### What protects, and at what cost" in page and "- x: 1.5 (holds)" in page
    assert "[A tiny chapter](../notebooks/tiny.ipynb)" in page


def test_the_status_page_keys_each_machine_once_and_keeps_smoke_runs_apart(repo):
    machine = {"device": "cpu", "cpu": "AMD EPYC", "capability": "AVX512", "blas": "mkl",
               "float_path": "OMP_NUM_THREADS=1", "python": "3.11.7", "torch": "2.13.0"}
    run = {"parameters": {}, "seconds": 10.0, "date": "2026-12-07 12:00 UTC", **machine}
    status.write_status_page(repo, {
        "a": {"ci": run, "paper-smoke": {**run, "seconds": 4.0}},
        "b": {"ci": {**run, "torch": "2.14.1"}, "paper": run},
    })
    page = (repo / "notebooks" / "status.md").read_text()
    table, smoke = page.split("## Smoke runs")
    assert "| a | ci | default | 10\u00a0s | 2026-12-07\u00a012:00 | n/a | M1 |" in table
    assert "| b | ci | default | 10\u00a0s | 2026-12-07\u00a012:00 | n/a | M2 |" in table
    assert "| b | paper | default | 10\u00a0s | 2026-12-07\u00a012:00 | n/a | M1 |" in table  # same machine, same key
    assert table.count("- **M1**: cpu; AMD EPYC;") == 1 and "torch 2.14.1" in table.split("- **M2**")[1]
    assert "paper-smoke" not in table and "| a | 4\u00a0s | 2026-12-07\u00a012:00 |" in smoke
