"""gradcore.book.reaper: a job's wrapper that waits for the processes the job orphans."""

import subprocess
import sys

import pytest

from gradcore.book import jobs


def python(code: str) -> list:
    return [sys.executable, "-c", code]


def reaper(command: list, grace: float) -> subprocess.CompletedProcess:
    """``reaper.py COMMAND`` with a shorter grace, run as the jobs run it: by path, in a process."""
    script = (f"import sys; sys.path.insert(0, {str(jobs.REAPER.parent)!r}); import reaper; "
              f"reaper.GRACE_SECONDS = {grace}; sys.exit(reaper.main({command!r}))")
    return subprocess.run(python(script), capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers are Linux's")
def test_a_process_still_running_after_the_grace_is_reported_and_left_alone():
    leaver = python("import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
                    "'import time; time.sleep(3)'], start_new_session=True)")
    result = reaper(leaver, grace=0.3)
    assert result.returncode == 0
    assert "reaper: 1 process(es) left running" in result.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers are Linux's")
def test_an_orphan_that_ends_within_the_grace_is_waited_for():
    quick = python("import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
                   "'import time; time.sleep(0.5)'], start_new_session=True)")
    result = reaper(quick, grace=30)
    assert result.returncode == 0 and result.stderr == ""


def test_the_command_s_exit_status_is_the_reaper_s():
    assert reaper(python("import sys; sys.exit(3)"), grace=1).returncode == 3
    assert "usage" in reaper([], grace=1).stderr
