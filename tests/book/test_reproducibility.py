"""Tests of gradcore.book.reproducibility and gradcore.book.nbval_tolerance: what counts as reproduced.

Each rule is tested from both sides: the drift another CPU causes passes, the change a real
regression causes fails (a wrong paper number, a claim that stops holding, a changed count,
a PSNR that falls by more than its chapter allows).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from gradcore import claims
from gradcore.book import execution, freshness, reproducibility
from gradcore.book.reproducibility import Tolerance, compare_outputs, compare_text, kind_of

from .tiny import HEADER

REPO = Path(__file__).resolve().parents[2]
TOLERANCE = Tolerance(decibels=1.0, magnitude=0.25, fraction=0.01, other=0.05, roundoff=1e-12)


def test_number_kinds_are_read_from_the_words_around_them():
    assert kind_of("LeNet PSNR after 100 steps") == "decibels"
    assert kind_of("gain over gray (dB)") == "decibels"
    assert kind_of("federated accuracy") == kind_of("SSIM") == kind_of("LPIPS") == "fraction"
    assert kind_of("MSE of the walk-back") == kind_of("client's loss") == "magnitude"
    assert kind_of("width 16") == "other"
    # the nearest announcing word to the left wins, so one line can mix kinds
    line = "MSE 0.0507, PSNR 13.32"
    assert reproducibility.line_kind(line, 4, 10) == "magnitude"
    assert reproducibility.line_kind(line, 17, 22) == "decibels"
    assert reproducibility.line_kind("0.91 (SSIM)", 0, 4) == "fraction"  # else the first to the right


def test_decimals_move_within_their_kind_and_no_further():
    assert compare_text("LeNet PSNR: 26.6, 39.3", "LeNet PSNR: 25.9, 39.8", TOLERANCE) == []
    failed = compare_text("LeNet PSNR: 26.6, 39.3", "LeNet PSNR: 24.1, 39.8", TOLERANCE, "cell 4")
    assert len(failed) == 1
    message = str(failed[0])
    assert "cell 4, line 1" in message and "'26.6' became '24.1'" in message and "±1 dB" in message
    # relative for magnitudes: 17% more MSE passes at 25%, three times the MSE does not
    assert compare_text("MSE 0.0120", "MSE 0.0140", TOLERANCE) == []
    assert compare_text("MSE 0.0120", "MSE 0.0360", TOLERANCE)
    assert compare_text("accuracy 0.953", "accuracy 0.955", TOLERANCE) == []
    assert compare_text("accuracy 0.953", "accuracy 0.853", TOLERANCE)


def test_integers_and_text_compare_exactly():
    assert compare_text("stopped 10 of 17 attacks", "stopped 11 of 17 attacks", TOLERANCE)[0].kind == "integer"
    assert compare_text("label accuracy 100 %", "label accuracy 99 %", TOLERANCE)
    assert compare_text("holds: yes", "holds: NO", TOLERANCE)[0].kind == "text"
    assert compare_text("a\nb", "a\nb\nc", TOLERANCE)[0].kind == "text"
    assert compare_text("PSNR 1.5 2.5", "PSNR 1.5", TOLERANCE)  # a number went missing
    assert compare_text("nan", "0.5", TOLERANCE)


def test_roundoff_is_not_a_result():
    assert compare_text("walked back (MSE) 1.01e-33", "walked back (MSE) 6.38e-34", TOLERANCE) == []
    assert compare_text("relative error 2.22e-16", "relative error 4.44e-16", TOLERANCE) == []
    assert compare_text("relative error 2.22e-16", "relative error 1.3e-06", TOLERANCE)
    # an exact reconstruction's PSNR is round-off too: 300 dB here, 290 dB elsewhere
    assert compare_text("PSNR 300.0", "PSNR 290.1", TOLERANCE) == []
    assert compare_text("PSNR 121.0", "PSNR 101.0", TOLERANCE)[0].allowed == "±1 dB, or both >= 120 dB (exact)"


def test_an_aligned_table_may_repad_when_a_number_changes_width():
    before = "claim   value\n-----  -----\nPSNR    17.76\nPSNR    9.5"
    after = "claim   value\n-----  ------\nPSNR    17.8\nPSNR    9.51"
    assert compare_text(before, after, TOLERANCE) == []


def test_tolerances_are_validated_and_merged():
    assert Tolerance().updated({"decibels": 2}).decibels == 2.0
    with pytest.raises(reproducibility.ToleranceError, match="unknown tolerance kind.*psnr"):
        Tolerance().updated({"psnr": 1})
    with pytest.raises(reproducibility.ToleranceError, match="decibels must be a finite number >= 0"):
        Tolerance(decibels=-1)
    with pytest.raises(reproducibility.ToleranceError):
        Tolerance().updated({"fraction": "0.1"})
    chapter = reproducibility.chapter_tolerance({"gradcore": {"tolerance": {"decibels": 0.5}}})
    assert chapter.decibels == 0.5 and chapter.roundoff == reproducibility.DEFAULT.roundoff
    assert reproducibility.cell_tolerance(chapter, {"tolerance": {"decibels": 3}}).decibels == 3
    assert reproducibility.cell_tolerance(chapter, {}).decibels == 0.5


def _display(obj) -> dict:
    return nbformat.v4.new_output("execute_result", data=obj._repr_mimebundle_(), execution_count=1)


def _claims(paper="19.77", psnr=17.76, bound=17.0):
    table = claims.Claims("Local steps")
    table.at_least("one local step: PSNR", paper, psnr, bound)
    table.add("the update diverges (growth)", "divergent", 563.2, True, ">= 10")
    return table


def test_claims_tables_compare_paper_values_and_verdicts_exactly():
    stored = [_display(_claims())]
    assert compare_outputs(stored, [_display(_claims(psnr=17.31))], TOLERANCE) == []
    wrong_paper = compare_outputs(stored, [_display(_claims(paper="19.78"))], TOLERANCE)
    assert len(wrong_paper) == 1 and "paper value or verdict" in wrong_paper[0].allowed
    regressed = compare_outputs(stored, [_display(_claims(psnr=15.2))], TOLERANCE)
    assert regressed and "row 1" in regressed[0].where and regressed[0].kind == "decibels"
    stops_holding = _claims(psnr=17.31, bound=17.5)
    assert any(d.where.endswith("column holds") for d in compare_outputs(stored, [_display(stops_holding)], TOLERANCE))


def test_measured_floats_always_print_a_decimal_point():
    # so that a measured 1171.3 is compared as a decimal, never exactly as an integer
    assert claims.format_value(1171.3) == "1171.0" and claims.format_value(100.0) == "100.0"
    assert claims.format_value(17.76) == "17.76" and claims.format_value(3e-17) == "3e-17" and claims.format_value(7) == "7"


def test_a_table_cell_takes_its_column_then_its_title_as_kind():
    def table(psnr, ssim):
        return _display(claims.Table("Attacks", ["attack", "PSNR", "SSIM"], [["dlg", psnr, ssim]]))

    assert compare_outputs([table(20.0, 0.5)], [table(20.9, 0.505)], TOLERANCE) == []
    assert compare_outputs([table(20.0, 0.5)], [table(20.0, 0.52)], TOLERANCE)[0].kind == "fraction"
    by_title = lambda v: _display(claims.Table("PSNR per defense", ["attack", "none"], [["dlg", v]]))  # noqa: E731
    assert compare_outputs([by_title(20.0)], [by_title(22.0)], TOLERANCE)[0].kind == "decibels"
    # a row label names a thing, not a metric: the title still decides
    attack = lambda v: _display(claims.Table("PSNR per defense", ["attack", "none"], [["cosine + TV", v]]))  # noqa: E731
    assert compare_outputs([attack(20.0)], [attack(20.9)], TOLERANCE) == []
    assert compare_text("PSNR per defense\ncosine + TV  20.0", "PSNR per defense\ncosine + TV  20.9", TOLERANCE,
                        fallback=("PSNR per defense",)) == []


def test_outputs_must_keep_their_fields_and_images_are_not_compared():
    stream = nbformat.v4.new_output("stream", name="stdout", text="PSNR 20.0\n")
    figure = nbformat.v4.new_output("display_data", data={"image/png": "AAAA", "text/plain": "<Figure>"})
    other = nbformat.v4.new_output("display_data", data={"image/png": "BBBB", "text/plain": "<Figure>"})
    assert compare_outputs([stream, figure], [stream, other], TOLERANCE) == []
    assert compare_outputs([stream, figure], [stream], TOLERANCE)[0].allowed == "the same output fields"
    assert compare_outputs([stream], [stream, stream], TOLERANCE)  # the same field twice


def test_the_sanitize_file_reads_as_nbval_reads_it():
    clean = reproducibility.sanitizer(REPO / "tests" / "nbval_sanitize.cfg")
    assert clean("wall 12.05 s") == clean("wall 3.1 s") == "wall T s"


def test_drift_is_measured_per_kind(tmp_path):
    def notebook(folder, psnr, count):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell("x", execution_count=1, outputs=[
            nbformat.v4.new_output("stream", name="stdout", text=f"PSNR {psnr}\nattacks stopped {count}\n")])]
        (tmp_path / folder).mkdir(exist_ok=True)
        nbformat.write(nb, str(tmp_path / folder / "chapter.ipynb"))

    notebook("committed", 20.25, 3)
    notebook("rerun", 19.75, 4)
    report = reproducibility.measure_drift(tmp_path / "committed", tmp_path / "rerun", "rerun")
    size, drift = report.largest()["chapter"]["decibels"]
    assert size == pytest.approx(0.5) and drift.where.startswith("cell 0")
    assert [d.kind for d in report.differences["chapter"]] == ["integer"]


# --------------------------------------------------------------------------- nbval, with a kernel

# A chapter with the tiny chapters' header (tiny.py), declaring a tolerance in its front matter.
CHAPTER = HEADER.rsplit("---\n", 1)[0] + """gradcore:
  tolerance:
    decibels: 0.5
---

# Tolerance

```{code-cell} ipython3
:tags: [parameters]
profile = "ci"
```

```{code-cell} ipython3
print("PSNR", 20.0, "attacks", 3)
```
"""


def _nbval(root: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "--nbval", "notebooks/chapter.ipynb", "--nbval-current-env",
           "-p", "no:cacheprovider", "-q", *extra]
    return subprocess.run(cmd, cwd=root, capture_output=True, text=True, env={**os.environ, **(env or {})})


@pytest.mark.kernel
def test_nbval_plugin_accepts_drift_and_names_a_regression(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "chapter.md").write_text(CHAPTER)
    path = execution.execute(tmp_path, "chapter")
    notebook = nbformat.read(path, as_version=4)
    assert notebook.metadata["gradcore"]["tolerance"] == {"decibels": 0.5}
    assert freshness.freshness(tmp_path) == []

    def committed(text):
        notebook.cells[-1].outputs[0]["text"] = text
        nbformat.write(notebook, str(path))

    committed("PSNR 20.3 attacks 3\n")  # as another CPU might have printed it
    plugin = ("-p", "gradcore.book.nbval_tolerance")
    log = tmp_path / "drift.jsonl"
    assert _nbval(tmp_path, *plugin, env={"GRADCORE_DRIFT_LOG": str(log)}).returncode == 0
    [record] = [json.loads(line) for line in log.read_text().splitlines()]
    assert record["chapter"] == "chapter" and record["kind"] == "decibels" and record["within"]
    assert record["size"] == pytest.approx(0.3)
    assert _nbval(tmp_path).returncode != 0  # plain nbval: bit-exact
    committed("PSNR 21.0 attacks 3\n")
    result = _nbval(tmp_path, *plugin)
    assert result.returncode != 0
    assert "chapter.ipynb cell 1" in result.stdout and "'21.0' became '20.0'" in result.stdout
    assert "±0.5 dB" in result.stdout
    committed("PSNR 20.0 attacks 4\n")
    assert "integer '4' became '3'" in _nbval(tmp_path, *plugin).stdout


def test_fragile_claims_are_those_a_declared_drift_could_flip():
    from gradcore.claims import Claims

    table = Claims("claims")
    table.at_least("recovers the image (PSNR over gray, dB)", "p", 10.5, 10.0)   # 0.5 dB from failing
    table.at_least("recovers it by far (PSNR over gray, dB)", "p", 13.0, 10.0)   # 3 dB
    table.less("noise protects more (MSE)", "p", 0.100, 0.105)                    # 5% apart
    table.less("CENSOR protects more (MSE)", "p", 0.100, 0.200)
    table.rate_at_least("locks on (draws)", "p", 9, 10, 0.5)                     # counts compare exactly
    table.not_reproduced("not here (PSNR, dB)", "p", 1.0, "no data")
    data = table._repr_mimebundle_()[reproducibility.TABLE_MIME]
    tolerance = reproducibility.Tolerance(decibels=1.0, magnitude=0.08, fraction=0.05, other=0.05, roundoff=1e-12)
    fragile = reproducibility.fragile_claims(data, tolerance)
    assert [row["claim"] for row in fragile] == ["recovers the image (PSNR over gray, dB)", "noise protects more (MSE)"]
    assert fragile[0]["kind"] == "decibels" and fragile[0]["allowed"] == pytest.approx(1.0)
    assert fragile[1]["allowed"] == pytest.approx(0.08 * (0.100 + 0.105))  # both sides of an ordering may move
    assert reproducibility.fragile_claims(data, reproducibility.Tolerance(roundoff=1e-12)) == []  # bit-exact: none


def test_rows_marked_exact_are_not_judged_by_the_drift_tolerance_and_must_match():
    from gradcore.claims import Claims

    def table(exact):
        claims = Claims("claims")
        claims.at_least("cosine to the unscaled gradient stays 1", "invariant", 1 - 1e-16, 1 - 1e-12, exact=exact)
        claims.at_least("iDLG label accuracy (%)", "100", 100.0, 100.0, exact=exact)
        return claims._repr_mimebundle_()[reproducibility.TABLE_MIME]

    tolerance = reproducibility.Tolerance(fraction=0.05, other=0.05, roundoff=1e-12)
    # Judged by a measured quantity's drift, an identity held "by 1e-12" looks fragile ...
    assert len(reproducibility.fragile_claims(table(False), tolerance)) == 2
    # ... marked exact, it is not, and the reader sees the mark.
    exact = table(True)
    assert exact["exact_rows"] == [0, 1] and reproducibility.fragile_claims(exact, tolerance) == []
    assert all(row[3].endswith("(exact)") for row in exact["rows"])
    assert "exact_rows" not in table(False)  # tables without exact rows are unchanged
    # A notebook made before a row was marked (or after the mark was dropped) is stale.
    differences = reproducibility.compare_table(table(False), exact, tolerance)
    assert any(difference.allowed == "same rows marked exact" for difference in differences)
