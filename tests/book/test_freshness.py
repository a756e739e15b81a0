"""Tests of gradcore.book.freshness: is each committed notebook its chapter's source, executed; tolerances synced."""

from __future__ import annotations

import nbformat
import pytest

from gradcore.book import freshness, layout, notebooks

from .tiny import write_fake_executed


def test_freshness_accepts_a_matching_notebook(repo):
    write_fake_executed(repo)
    assert freshness.freshness(repo) == []


def test_freshness_reports_a_missing_notebook(repo):
    (problem,) = freshness.freshness(repo)
    assert problem.startswith("tiny: notebooks/tiny.ipynb is missing") and "gradcore run tiny" in problem


def test_freshness_detects_an_edited_source(repo):
    write_fake_executed(repo)
    src = repo / "book" / "tiny.md"
    src.write_text(src.read_text().replace("n + 1", "n + 2"))
    (problem,) = freshness.freshness(repo)
    assert "tiny: cell 3 (code) differs from book/tiny.md" in problem
    assert "`n + 2`" in problem and "run `gradcore run tiny`" in problem


def test_freshness_detects_a_changed_output_tolerance(repo):
    write_fake_executed(repo)
    source = (repo / "book" / "tiny.md").read_text()
    declared = source.replace("---\n\n# A tiny", "gradcore:\n  tolerance: {decibels: 1.0}\n---\n\n# A tiny")
    (repo / "book" / "tiny.md").write_text(declared)
    assert "output tolerance" in freshness.freshness(repo)[0]
    write_fake_executed(repo)
    assert freshness.freshness(repo) == []
    cell = declared.replace(":tags: [parameters]\n", ":tags: [parameters]\n:tolerance: {fraction: 0.1}\n")
    (repo / "book" / "tiny.md").write_text(cell)
    assert "tolerance differs" in freshness.freshness(repo)[0]


def test_freshness_detects_an_added_cell(repo):
    write_fake_executed(repo)
    src = repo / "book" / "tiny.md"
    src.write_text(src.read_text() + "\n```{code-cell} ipython3\nn + 3\n```\n")
    (problem,) = freshness.freshness(repo)
    assert "book/tiny.md has 6 cells, notebooks/tiny.ipynb has 5" in problem


def test_freshness_detects_an_injected_parameters_cell(repo):
    path = write_fake_executed(repo)
    nb = nbformat.read(path, as_version=4)
    cell = nbformat.v4.new_code_cell("# Parameters\nn = 9\n", metadata={"tags": ["injected-parameters"]})
    nb.cells.insert(3, cell)
    nb.metadata["papermill"] = {"parameters": {"n": 9}}
    notebooks.write_notebook(notebooks.normalise(nb), path)
    (problem,) = freshness.freshness(repo)
    assert "non-default parameters (n=9)" in problem and "ci profile" in problem


def test_tolerances_are_synced_without_re_executing(repo):
    path = write_fake_executed(repo)
    nb = nbformat.read(path, as_version=4)
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="PSNR 20.0\n")]
    notebooks.write_notebook(nb, path)
    source = (repo / "book" / "tiny.md").read_text()
    declared = source.replace("---\n\n# A tiny", "gradcore:\n  tolerance: {decibels: 2.0}\n---\n\n# A tiny")
    (repo / "book" / "tiny.md").write_text(declared.replace(":tags: [parameters]\n", ":tags: [parameters]\n:tolerance: {fraction: 0.1}\n"))
    assert freshness.freshness(repo)
    assert freshness.sync_tolerances(repo) == ["notebooks/tiny.ipynb"]
    assert freshness.freshness(repo) == [] and freshness.sync_tolerances(repo) == []
    synced = nbformat.read(path, as_version=4)
    assert synced.metadata["gradcore"]["tolerance"] == {"decibels": 2.0}
    assert synced.cells[2].outputs[0]["text"] == "PSNR 20.0\n"  # outputs untouched
    (repo / "book" / "tiny.md").write_text(declared.replace("n = 3", "n = 4"))
    with pytest.raises(layout.PipelineError, match="beyond tolerances"):
        freshness.sync_tolerances(repo)

