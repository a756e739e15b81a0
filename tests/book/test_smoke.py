"""Smoke runs of the paper profile: budgets cut by data in gradcore.papers, claims shown not asserted."""

import pytest

from gradcore import claims, papers
from gradcore.book import execution, layout


def test_execution_sets_the_variable_papers_reads():
    """A smoke run's kernel gets the switch under the name the settings look up (one constant, in papers)."""
    assert execution.SMOKE_VARIABLE == papers.SMOKE_VARIABLE == "GRADCORE_SMOKE"


@pytest.mark.parametrize("paper", list(papers.PAPERS), ids=str)
def test_every_paper_cuts_its_paper_budgets_and_keeps_its_shapes(paper, monkeypatch):
    source = papers.PAPERS[paper]
    full = source.settings("paper")
    monkeypatch.setenv(papers.SMOKE_VARIABLE, "1")
    smoke = source.settings("paper")
    assert source.smoke, f"{paper} declares no smoke budgets"
    changed = [name for name in vars(full) if not name.startswith("_") and getattr(full, name) != getattr(smoke, name)]
    assert sorted(changed) == sorted(source.smoke)
    for name in changed:
        before, after = getattr(full, name), getattr(smoke, name)
        if isinstance(before, dict):  # merged: the keys the smoke run leaves alone stay the paper's
            assert set(before) == set(after)
    # The ci profile is never touched by the variable.
    assert vars(source.settings("ci")) == vars(papers.PAPERS[paper].settings("ci"))


def test_smoke_variable_leaves_the_ci_profile_alone(monkeypatch):
    ci = vars(papers.DLG.settings("ci"))
    monkeypatch.setenv(papers.SMOKE_VARIABLE, "1")
    assert vars(papers.DLG.settings("ci")) == ci


def test_a_smoke_key_the_paper_profile_lacks_is_refused_at_definition():
    with pytest.raises(ValueError, match="smoke sets iteratoins"):
        papers.Paper("x", "c", {}, {"ci": {"iterations": 1}, "paper": {"iterations": 9}}, smoke={"iteratoins": 1})
    with pytest.raises(ValueError, match="smoke fed sets round"):
        papers.Paper("x", "c", {"fed": {"rounds": 9}}, {"ci": {}, "paper": {}}, smoke={"fed": {"round": 1}})


def test_smoke_claims_are_shown_but_not_asserted(monkeypatch, capsys):
    monkeypatch.setenv(papers.SMOKE_VARIABLE, "1")
    table = claims.Claims("t")
    table.at_least("fails at this budget", 10, 1.0, 5.0)
    table.check()  # would raise outside a smoke run
    assert "1 would not hold" in capsys.readouterr().out
    assert "not asserted" in table.title and "smoke: not asserted" in repr(table)
    monkeypatch.delenv(papers.SMOKE_VARIABLE)
    table = claims.Claims("t")
    table.at_least("fails", 10, 1.0, 5.0)
    with pytest.raises(AssertionError):
        table.check()


def test_smoke_needs_the_paper_profile(tmp_path):
    with pytest.raises(layout.PipelineError, match="needs --profile paper"):
        execution.execute(tmp_path, "dlg", "ci", smoke=True)
