"""gradcore.book.jobs: processes run several at once, single-threaded, longest first, after their dependencies."""

import signal
import sys

import pytest

from gradcore.book import jobs


def python(code: str) -> list:
    return [sys.executable, "-c", code]


def test_jobs_run_with_one_thread_and_report_their_output_and_cpu(tmp_path):
    lines = []
    outcomes = jobs.run([jobs.Job("busy", python("import os\nx = sum(i * i for i in range(3_000_000))\n"
                                                 "print('threads', os.environ['OMP_NUM_THREADS'], os.environ['MKL_NUM_THREADS'])"))],
                        workers=1, log_dir=tmp_path, echo=lines.append)
    (outcome,) = outcomes
    assert outcome.status == "done" and outcome.returncode == 0
    assert "threads 1 1" in outcome.log
    assert outcome.cpu > 0.05  # the child's own CPU time, from wait4
    assert any("threads 1 1" in line for line in lines) and any(line.startswith("-- busy: done") for line in lines)


def test_longest_job_starts_first_and_dependants_wait(tmp_path):
    marker = tmp_path / "order.txt"
    append = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')"
    job_list = [jobs.Job("short", python(append) + [str(marker), "short"], estimate=1),
                jobs.Job("long", python(append) + [str(marker), "long"], estimate=100),
                jobs.Job("after", python(append) + [str(marker), "after"], estimate=500, after=("short", "long"))]
    jobs.run(job_list, workers=1, log_dir=tmp_path, echo=lambda line: None)
    assert marker.read_text().split() == ["long", "short", "after"]


def test_a_short_job_that_a_long_one_waits_for_starts_before_a_medium_one(tmp_path):
    """Order by critical path: the fixtures (5 s) before the 50-s job, since 100 s wait on them."""
    marker = tmp_path / "order.txt"
    append = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')"
    job_list = [jobs.Job("medium", python(append) + [str(marker), "medium"], estimate=50),
                jobs.Job("fixtures", python(append) + [str(marker), "fixtures"], estimate=5),
                jobs.Job("smoke", python(append) + [str(marker), "smoke"], estimate=100, after=("fixtures",))]
    assert jobs.critical_paths(job_list) == {"medium": 50, "fixtures": 105, "smoke": 100}
    jobs.run(job_list, workers=1, log_dir=tmp_path, echo=lambda line: None)
    assert marker.read_text().split() == ["fixtures", "smoke", "medium"]


def test_jobs_that_wait_on_each_other_in_a_cycle_are_refused():
    with pytest.raises(ValueError, match="cycle: a -> b -> a"):
        jobs.run([jobs.Job("a", python(""), after=("b",)), jobs.Job("b", python(""), after=("a",))], workers=1)


def test_a_failed_job_skips_its_dependants_and_not_the_others(tmp_path):
    job_list = [jobs.Job("fails", python("raise SystemExit(3)")),
                jobs.Job("needs it", python("print('never')"), after=("fails",)),
                jobs.Job("independent", python("print('ran')"))]
    outcomes = {o.name: o for o in jobs.run(job_list, workers=2, log_dir=tmp_path, echo=lambda line: None)}
    assert outcomes["fails"].status == "FAILED" and outcomes["fails"].returncode == 3
    assert outcomes["needs it"].status == "skipped"
    assert outcomes["independent"].status == "done" and "ran" in outcomes["independent"].log


def test_environment_adds_and_removes_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADCORE_TEST_GONE", "here")
    code = "import os; print(os.environ.get('GRADCORE_TEST_GONE'), os.environ.get('GRADCORE_TEST_NEW'))"
    (outcome,) = jobs.run([jobs.Job("env", python(code), environment={"GRADCORE_TEST_GONE": None, "GRADCORE_TEST_NEW": "x"})],
                          workers=1, log_dir=tmp_path, echo=lambda line: None)
    assert "None x" in outcome.log


def test_bad_job_lists_are_refused():
    with pytest.raises(ValueError, match="unique"):
        jobs.run([jobs.Job("a", python("")), jobs.Job("a", python(""))], workers=1)
    with pytest.raises(ValueError, match="unknown jobs: b"):
        jobs.run([jobs.Job("a", python(""), after=("b",))], workers=1)


def test_default_workers_reads_the_variable(monkeypatch):
    monkeypatch.setenv(jobs.JOBS_VARIABLE, "3")
    assert jobs.default_workers() == 3
    monkeypatch.setenv(jobs.JOBS_VARIABLE, "0")
    with pytest.raises(ValueError, match="GRADCORE_JOBS"):
        jobs.default_workers()
    monkeypatch.delenv(jobs.JOBS_VARIABLE)
    assert jobs.default_workers() >= 1


def test_summary_lists_every_job_and_the_total():
    text = jobs.summary([jobs.Outcome("a", "done", 2.0, 1.5), jobs.Outcome("b", "FAILED", 1.0, 0.5)], wall=2.5)
    assert text.splitlines()[1].startswith("a ") and "FAILED" in text and text.splitlines()[-1].split()[-2:] == ["2.5", "2.0"]


def test_a_job_that_mostly_waits_leaves_room_for_another(tmp_path):
    """With one worker, a job declared at half a core runs beside a full one; two full ones never overlap."""
    marker = tmp_path / "log.txt"
    # Each job writes "start NAME", waits until the file holds two starts or 3 s pass, then "end NAME".
    step = ("import sys, time; p, name = sys.argv[1], sys.argv[2]; open(p, 'a').write(f'start {name}\\n')\n"
            "deadline = time.time() + 3\n"
            "while open(p).read().count('start') < 2 and time.time() < deadline: time.sleep(0.05)\n"
            "open(p, 'a').write(f'end {name}\\n')")
    waiting = [jobs.Job("waits", python(step) + [str(marker), "waits"], estimate=2, cores=0.5),
               jobs.Job("busy", python(step) + [str(marker), "busy"], estimate=1)]
    jobs.run(waiting, workers=1, log_dir=tmp_path, echo=lambda line: None)
    events = marker.read_text().split()
    assert events[0::2][:2] == ["start", "start"] and set(events[1::2][:2]) == {"waits", "busy"}  # overlapped
    marker.unlink()
    full = [jobs.Job("first", python(step) + [str(marker), "first"], estimate=2),
            jobs.Job("second", python(step) + [str(marker), "second"], estimate=1)]
    jobs.run(full, workers=1, log_dir=tmp_path, echo=lambda line: None)
    assert marker.read_text().split()[:4] == ["start", "first", "end", "first"]  # one after the other
    with pytest.raises(ValueError, match="cores"):
        jobs.Job("x", ["true"], cores=0)


def test_jobs_that_mostly_wait_run_beside_every_busy_one_but_fill_one_core_at_most():
    busy = [jobs.Job(f"busy {i}", ["true"]) for i in range(2)]
    waits = jobs.Job("waits", ["true"], cores=0.6)
    assert jobs._fits(waits, busy, workers=2)  # beside both workers' busy jobs
    assert not jobs._fits(jobs.Job("busy 3", ["true"]), [*busy, waits], workers=2)
    assert not jobs._fits(jobs.Job("waits too", ["true"], cores=0.6), [waits], workers=2)
    assert jobs._fits(jobs.Job("waits less", ["true"], cores=0.4), [waits], workers=2)


ORPHAN = """
import subprocess, sys
# A grandchild in its own session, never waited for: the job's process exits at once and leaves it
# to be adopted, as a Flower SuperNode stopped by PID leaves its app processes.
subprocess.Popen([sys.executable, "-c", "import time\\nend = time.process_time() + 0.6\\n"
                  "while time.process_time() < end: pass"], start_new_session=True)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers are Linux's")
def test_the_cpu_time_of_processes_a_job_orphans_is_counted(tmp_path):
    (outcome,) = jobs.run([jobs.Job("orphaning", python(ORPHAN))], workers=1, log_dir=tmp_path,
                          echo=lambda line: None)
    assert outcome.status == "done"
    assert outcome.cpu >= 0.6  # the orphan's 0.6 s, which wait4 on the job's process alone misses


@pytest.mark.parametrize("name", ["SIGTERM", "SIGKILL"])
def test_a_job_killed_by_a_signal_reports_that_signal(tmp_path, name):
    code = f"import os, signal; os.kill(os.getpid(), signal.{name})"
    (outcome,) = jobs.run([jobs.Job("killed", python(code))], workers=1, log_dir=tmp_path, echo=lambda line: None)
    assert outcome.status == "FAILED" and outcome.returncode == -getattr(signal, name)


def test_a_command_that_cannot_start_fails_its_job_and_says_why(tmp_path):
    (outcome,) = jobs.run([jobs.Job("missing", ["no-such-command-gradcore"])], workers=1, log_dir=tmp_path,
                          echo=lambda line: None)
    assert outcome.status == "FAILED" and outcome.returncode == 127
    assert "cannot run 'no-such-command-gradcore'" in outcome.log
