"""Tests of gradcore.book.cli: the gradcore command: user errors, the jobs of `gradcore test`."""

from __future__ import annotations

import json

import pytest

from gradcore.book import cli, layout

from .tiny import TINY, write_fake_executed


def test_cli_user_errors_exit_non_zero_without_traceback(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    assert cli.main(["run", "nope"]) == 1
    err = capsys.readouterr().err
    assert "unknown chapter 'nope'; known chapters: tiny" in err and "Traceback" not in err
    assert cli.main(["run", "tiny", "-p", "steps", "3"]) == 1
    assert "unknown parameter steps" in capsys.readouterr().err
    assert cli.main(["run", "tiny", "-p", "n", "three"]) == 1
    assert "'three' is not a valid int" in capsys.readouterr().err
    assert cli.main(["list"]) == 0
    assert "n = 3" in capsys.readouterr().out


def test_cli_check_freshness_failure(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    with pytest.raises(layout.PipelineError, match="out of date"):
        cli.fresh(repo)
    assert "stale: tiny: notebooks/tiny.ipynb is missing" in capsys.readouterr().out


def test_test_command_schedules_every_check_as_single_threaded_jobs(repo):
    write_fake_executed(repo)
    (repo / "book" / "other.md").write_text(TINY.replace("# A tiny chapter", "# Another"))
    write_fake_executed(repo, "other")
    check = cli.check_jobs(repo)
    smoke = cli.smoke_jobs(repo, repo / "data", workers=2)
    names = [job.name for job in smoke + check]
    assert names == ["smoke fixtures", "smoke other", "smoke tiny", "nbval other", "nbval tiny",
                     "jupyter-book build -W", "browser check"]
    by_name = {job.name: job for job in smoke + check}
    assert by_name["browser check"].after == ("jupyter-book build -W",)
    assert by_name["smoke tiny"].after == ("smoke fixtures",)
    assert by_name["smoke tiny"].environment["GRADCORE_DATA"] == str(repo / "data")
    # nbval's kernels see what papermill's saw: the ci profile, the hash seed, no Agg backend.
    environment = by_name["nbval tiny"].environment
    assert environment["GRADCORE_PROFILE"] == "ci" and environment["PYTHONHASHSEED"] == "0"
    assert environment["MPLBACKEND"] is None
    assert "gradcore.book.nbval_tolerance" in by_name["nbval tiny"].command
    assert "gradcore.book.nbval_tolerance" not in cli.check_jobs(repo, exact=True)[0].command


def test_smoke_runs_share_a_kernel_per_core_and_a_waiting_chapter_runs_alone(repo):
    """Chapters that keep a core busy are dealt, longest first, into one kernel per worker; a
    chapter that declares it mostly waits (cores < 1: Flower) gets a job of its own."""
    estimates = {"tiny": 50.0, "a": 40.0, "b": 30.0, "c": 20.0}
    (repo / "notebooks" / "status.json").write_text(json.dumps(
        {name: {"paper-smoke": {"seconds": seconds}} for name, seconds in estimates.items()}))
    for name in ("a", "b", "c"):
        (repo / "book" / f"{name}.md").write_text(TINY)
    waiting = TINY.replace("name: python3\n---", "name: python3\ngradcore:\n  cores: 0.5\n---")
    (repo / "book" / "waits.md").write_text(waiting)
    smoke = {job.name: job for job in cli.smoke_jobs(repo, repo / "data", workers=2)}
    assert sorted(smoke) == ["smoke a, b", "smoke fixtures", "smoke tiny, c", "smoke waits"]
    assert smoke["smoke tiny, c"].command[-5:] == ["tiny", "c", "--profile", "paper", "--smoke"]
    assert smoke["smoke tiny, c"].estimate == 70.0 and smoke["smoke tiny, c"].cores == 1.0
    assert smoke["smoke waits"].cores == 0.5
    recorded = cli.smoke_jobs(repo, repo / "data", workers=2, record=True)
    assert all(job.command[-1] == "--record" for job in recorded if job.name != "smoke fixtures")


def test_record_goes_only_with_a_smoke_run(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    assert cli.main(["run", "tiny", "--record"]) == 1
    assert "--record stores a smoke run's time" in capsys.readouterr().err


def test_several_chapters_run_only_as_smoke_runs(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    assert cli.main(["run", "tiny", "tiny"]) == 1
    assert "several chapters run in one kernel only as smoke runs" in capsys.readouterr().err


def test_chapter_jobs_start_the_slowest_chapter_first(repo):
    (repo / "notebooks" / "status.json").write_text(json.dumps({"tiny": {"ci": {"seconds": 300.0}}}))
    (repo / "book" / "other.md").write_text(TINY)
    jobs_ = cli.chapter_jobs(repo, layout.chapters(repo), {"seed": 3}, repo / "out", "seed 3:")
    assert {job.name: job.estimate for job in jobs_} == {"seed 3: other": 60.0, "seed 3: tiny": 300.0}
    command = jobs_[1].command
    assert command[-6:] == ["tiny", "-p", "seed", "3", "--output", str(repo / "out" / "tiny.ipynb")]

