"""gradcore.claims: paper-vs-reproduced tables, their verdicts and margins."""

from __future__ import annotations

import math

import pytest

from gradcore import claims
from gradcore.claims import Claims


@pytest.mark.parametrize("method, arguments, holds", [
    ("at_most", {"paper": "exact", "reproduced": 3e-17, "bound": 1e-12}, True),
    ("at_most", {"paper": "exact", "reproduced": 1e-12, "bound": 1e-12}, True),  # bound included
    ("at_most", {"paper": "exact", "reproduced": 2e-12, "bound": 1e-12}, False),
    ("at_least", {"paper": 100.0, "reproduced": 100.0, "bound": 95.0}, True),
    ("at_least", {"paper": 100.0, "reproduced": 94.9, "bound": 95.0}, False),
    ("close_to", {"paper": 89.9, "reproduced": 85.0, "tolerance": 5.0}, True),
    ("close_to", {"paper": 89.9, "reproduced": 95.0, "tolerance": 5.0}, False),
    ("close_to", {"paper": 89.9, "reproduced": math.nan, "tolerance": 5.0}, False),
    ("less", {"paper": "DLG < iDLG", "smaller": 0.8, "larger": 1.0}, True),
    ("less", {"paper": "DLG < iDLG", "smaller": 1.0, "larger": 1.0}, False),  # strict
])
def test_verdicts(method, arguments, holds):
    table = Claims("t")
    getattr(table, method)("a claim", **arguments)
    assert len(table.rows) == 1 and table.rows[0].holds is holds
    assert table.failures == ([] if holds else table.rows)


def test_tests_are_described():
    table = Claims("t")
    table.at_most("a", "exact", 0.0, 1e-12)
    table.at_least("b", 100.0, 99.0, 95)
    table.close_to("c", 89.9, 90.0, 5.0)
    table.less("d", "ordering", 1.0, 2.0, names=("dlg", "idlg"))
    table.add("e", "p", "r", holds=1)
    assert [row.test for row in table.rows] == ["<= 1e-12", ">= 95", "within 5.0 of paper", "ordering", ""]
    assert table.rows[3].reproduced == "dlg 1.0 < idlg 2.0"
    assert table.rows[4].holds is True


def test_check_passes_when_everything_holds():
    table = Claims("t")
    table.at_most("exact", "exact", 0.0, 1e-12)
    assert table.check() is table


def test_check_names_every_failure():
    table = Claims("t")
    table.at_most("closed form is exact", "exact", 0.5, 1e-12)
    table.at_least("labels are right", 100.0, 100.0, 99.0)
    table.close_to("DLG label accuracy", 89.9, 50.0, 5.0)
    with pytest.raises(AssertionError) as caught:
        table.check()
    message = str(caught.value)
    assert message.startswith("2 of 3 claims do not hold: ")
    assert "closed form is exact (paper exact, reproduced 0.5, <= 1e-12)" in message
    assert "DLG label accuracy (paper 89.9, reproduced 50.0, within 5.0 of paper)" in message
    assert "labels are right" not in message


def test_repr_is_an_aligned_text_table():
    table = Claims("Deep Leakage from Gradients")
    table.at_most("closed form is exact", "exact", 3e-17, 1e-12)
    table.close_to("accuracy", 89.9, 12345.0, 1.0)
    lines = repr(table).splitlines()
    assert lines[0] == "Deep Leakage from Gradients"
    assert lines[1].split() == ["claim", "paper", "reproduced", "test", "holds", "margin"]
    assert set(lines[2].replace(" ", "")) == {"-"}
    assert lines[3].split()[-2:] == ["yes", "1e-12"] and "3e-17" in lines[3] and "<= 1e-12" in lines[3]
    assert lines[4].split()[-2:] == ["NO", "-1.23e+04"] and "1.23e+04" in lines[4]
    assert len(lines) == 5
    # Columns line up: every column starts where the header's does.
    starts = [lines[1].index(word) for word in ("paper", "reproduced", "test", "holds")]
    assert all(lines[2][s - 2 : s] == "  " for s in starts)


def test_html_escapes_cells():
    table = Claims("a <b> title")
    table.add("x < y & z", "<p>", 1.0, True)
    markup = table._repr_html_()
    assert "a &lt;b&gt; title" in markup and "x &lt; y &amp; z" in markup and "<p>" not in markup
    assert markup.count("<tr") == 2 and "<tr class='claim-holds'>" in markup
    table.not_reproduced("w", "p", "v", "why")
    table.add("f", "p", 0.0, False, "t", -1.0)
    markup = table._repr_html_()
    # Each verdict has its own class and mark, so a reader tells them apart in any theme and in print.
    assert "<tr class='claim-not-reproduced'>" in markup and "\u2013 n/a" in markup
    assert "<tr class='claim-fails'>" in markup and "\u2717 NO" in markup
    assert "<td class='number'>1.0</td>" in markup


def test_html_folds_a_reason_whole_and_links_the_reading_guide():
    table = Claims("t")
    reason = "data: " + "a long reason, " * 20 + "<the end>"
    table.not_reproduced("w", "p", "v", reason)
    markup = table._repr_html_()
    # The reason is out of the test column's text, folded, whole and escaped; the text form keeps it inline.
    assert "<td class='reason'>not reproduced<details><summary>why</summary>" in markup
    assert reason.replace("<", "&lt;").replace(">", "&gt;") + "</details>" in markup
    assert f"not reproduced: {reason}" in repr(table)
    assert "href='../book/intro.html#how-to-read-a-claims-table'" in markup


@pytest.mark.parametrize("value, text", [
    (True, "yes"), (False, "no"), (0.0, "0"), (math.nan, "nan"), (math.inf, "inf"), (3e-17, "3e-17"),
    (0.5, "0.5"), (89.9, "89.9"), (1.23456, "1.235"), (12345.0, "1.23e+04"), (7, "7"), ("exact", "exact"),
    (4800, "4800"), (-9999, "-9999"), (24576, "24,576"), (2797096, "2,797,096"), (-10_000, "-10,000"),
])
def test_number_formatting(value, text):
    assert claims.format_value(value) == text


@pytest.mark.parametrize("bound, text", [
    (1 - 1e-12, "1 - 1e-12"), (1 - 1e-6, "1 - 1e-6"), (100 - 1e-7, "100 - 1e-7"), (-1 + 1e-10, "-1 + 1e-10"),
    (0.999, "0.999"), (40.0, "40.0"), (1e-8, "1e-08"), (0.0, "0"), (3, "3"), (math.nan, "nan"),
])
def test_a_bound_is_never_rounded_onto_a_whole_number_it_is_not(bound, text):
    assert claims.format_bound(bound) == text


def test_a_bound_near_one_reads_as_such_in_the_test_column():
    table = Claims("t")
    table.at_least("cosine stays 1", 1.0, 1 - 2e-16, 1 - 1e-12, exact=True)
    table.at_most("gap", 0.0, 1e-9, 1e-8)
    assert [row.test for row in table.rows] == [">= 1 - 1e-12 (exact)", "<= 1e-08"]


def test_results_table():
    table = claims.Table("Results", ["batch", "psnr"], [[1, 41.234567], [4, 12.0]])
    lines = repr(table).splitlines()
    assert lines[0] == "Results" and lines[1].split() == ["batch", "psnr"]
    assert lines[3].split() == ["1", "41.23"] and lines[4].split() == ["4", "12.0"]
    assert table._repr_html_().count("<tr>") == 3


def test_diverged_magnitudes_print_as_diverged():
    assert claims.bounded(0.031) == 0.031 and claims.bounded(-999.0) == -999.0
    assert claims.bounded(1.9e5) == claims.bounded(4e7) == "diverged (> 1000)"
    assert claims.bounded(float("nan")) == "diverged (> 1000)"
    assert claims.bounded(float("inf"), 10) == "diverged (> 10)"


@pytest.mark.parametrize("method, arguments, margin", [
    ("at_most", dict(reproduced=0.25, bound=1.0), 0.75),
    ("at_least", dict(reproduced=0.25, bound=1.0), -0.75),
    ("close_to", dict(reproduced=10.5, tolerance=2.0), 1.5),
])
def test_margin_is_the_distance_to_failing(method, arguments, margin):
    table = Claims("t")
    getattr(table, method)("c", 10.0 if method == "close_to" else "p", **arguments)
    assert table.rows[0].margin == pytest.approx(margin)
    assert (table.rows[0].margin > 0) == table.rows[0].holds


def test_ordering_and_trend_margins():
    table = Claims("t")
    table.less("c", "p", 1.0, 4.0)
    table.increasing("rises", "p", [1.0, 3.0, 3.5], names=["a", "b", "c"])
    table.decreasing("falls", "p", [5.0, 2.0, 2.0])
    assert [row.margin for row in table.rows] == [3.0, 0.5, 0.0]
    assert [row.holds for row in table.rows] == [True, True, False]
    assert table.rows[1].reproduced == "a 1.0 < b 3.0 < c 3.5"
    assert table.rows[2].reproduced == "5.0 > 2.0 > 2.0"


def test_margin_column_is_shown_and_not_compared():
    from gradcore.book.reproducibility import TABLE_MIME, Tolerance, compare_table
    table = Claims("t")
    table.at_least("PSNR above the gray guess (dB)", "p", 20.0, 15.0)
    table.add("labels right", "all", "all", True)
    table.not_reproduced("x", "p", "n/a", "no data")
    cells = [row[-1] for row in table._cells()]
    assert cells == ["5.0", "categorical", "not asserted"]
    stored = table._repr_mimebundle_()[TABLE_MIME]
    moved = Claims("t")
    moved.at_least("PSNR above the gray guess (dB)", "p", 20.0, 15.0)
    moved.add("labels right", "all", "all", True)
    moved.not_reproduced("x", "p", "n/a", "no data")
    new = moved._repr_mimebundle_()[TABLE_MIME]
    new["rows"][0][5] = "9.0"
    assert compare_table(stored, new, Tolerance()) == []
    new["rows"][0][2] = "29.0"
    assert compare_table(stored, new, Tolerance())


def test_claims_are_read_back_from_an_executed_notebook(tmp_path):
    import json

    from gradcore.book.reproducibility import TABLE_MIME
    from gradcore.claims import claims_in_notebook, tightest_rows
    table = Claims("chapter")
    table.at_least("PSNR over gray (dB)", "p", 20.0, 15.0)
    table.at_most("error", "exact", 1e-9, 1e-8)
    table.add("labels", "all", "all", True)
    other = {"title": "not claims", "header": ["a"], "rows": [["1"]], "exact": []}
    notebook = {"cells": [{"outputs": [{"data": {TABLE_MIME: table._repr_mimebundle_()[TABLE_MIME]}},
                                       {"data": {TABLE_MIME: other}}, {"text": "x"}]}]}
    path = tmp_path / "chapter.ipynb"
    path.write_text(json.dumps(notebook))
    found = claims_in_notebook(path)
    assert [t["title"] for t in found] == ["chapter"]
    # Ranked by margin over threshold: 5 of 15 dB (a third) is tighter than 9e-9 of 1e-8 (nine tenths).
    assert tightest_rows(found[0], 2) == [("PSNR over gray (dB)", "yes", "5.0"), ("error", "yes", "9e-09")]


def test_a_value_never_measured_fails_its_claim_instead_of_stopping_the_chapter():
    table = Claims("t")
    table.less("ordering", "p", None, 3.0)
    table.at_least("threshold", "p", None, 1.0)
    table.at_most("bound", "p", None, 1.0)
    table.close_to("close", 2.0, None, 0.5)
    table.increasing("trend", "p", [1.0, None, 3.0])
    assert [row.holds for row in table.rows] == [False] * 5
    with pytest.raises(AssertionError, match="5 of 5 claims"):
        table.check()


def test_report_only_mode_shows_failures_without_raising(monkeypatch, capsys):
    from gradcore import claims

    table = claims.Claims("t")
    table.at_least("fails", 10, 1.0, 5.0)
    with pytest.raises(AssertionError):
        table.check()
    monkeypatch.setenv(claims.REPORT_VARIABLE, "1")
    table.check()
    assert "1 of 1 claims do not hold (reported, not asserted" in capsys.readouterr().out
    assert "NO" in repr(table)


def test_seed_summary_counts_each_claim_over_the_seeds():
    from gradcore import claims

    def table(*verdicts):
        return [{"title": "T", "header": ["claim", "paper", "reproduced", "test", "holds", "margin"],
                 "rows": [[f"claim {i} (seed-dependent words)", "p", "r", "t", v, "1"] for i, v in enumerate(verdicts)]}]

    summary = claims.seed_summary({10: table("yes", "yes", "n/a"), 11: table("yes", "NO", "n/a"), 12: table("yes")})
    assert [(r["held"], r["failed"], r["not reproduced"], r["missing"]) for r in summary] == [
        ([10, 11, 12], [], [], []), ([10], [11], [], [12]), ([], [], [10, 11], [12])]


def test_rate_claims_use_the_wilson_interval():
    from gradcore import claims

    low, high = claims.wilson(263, 400)
    assert abs(low - 0.6097) < 1e-3 and abs(high - 0.7023) < 1e-3  # the textbook formula's values
    assert claims.wilson(0, 10)[0] == 0.0 and claims.wilson(10, 10)[1] == 1.0
    table = claims.Claims("t")
    table.rate_at_least("most", "p", 263, 400, 0.5)
    table.rate_at_least("nearly all", "p", 9, 10, 0.9)  # 90% measured, but 10 draws cannot show it
    table.rate_at_least("of nothing", "p", 0, 0, 0.5)  # no draws: fails, does not crash the chapter
    assert [row.holds for row in table.rows] == [True, False, False]
    assert "263 of 400 (66%; 95% CI 61%-70%)" == table.rows[0].reproduced
    with pytest.raises(ValueError):
        claims.wilson(5, 4)


def test_findings_quote_the_measured_rows_and_name_every_claim_not_reproduced():
    table = claims.Claims("t")
    table.at_most("closed form exact (MSE)", "exact", 3e-17, 1e-12)
    table.at_least("attack recovers (PSNR, dB)", 20.0, 12.5, 18.0)
    table.not_reproduced("label from the gradient on CIFAR-100", "100%", "n/a", "data not on disk")
    text = claims.findings([table], ["closed form", "attack recovers"])
    assert text.startswith("**1 of 2 checked claims hold; 1 not reproduced.**")
    assert "- closed form exact (MSE): 3e-17 (paper: exact; holds)" in text
    assert "- attack recovers (PSNR, dB): 12.5 (paper: 20.0; does NOT hold)" in text
    assert "The 1 claim not reproduced here" in text and text.endswith("- label from the gradient on CIFAR-100\n\n</details>")
    with pytest.raises(ValueError, match="matches 0 claims"):
        claims.findings([table], ["no such claim"])
