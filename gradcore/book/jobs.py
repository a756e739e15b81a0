"""Run the book's work (chapters, notebook checks, smoke runs, tests) as processes, several at once.

Two torch processes with one thread each on two cores each run at full speed, while one
process with two threads gains only 1.1-1.4x on these small models (and two two-threaded
processes on two cores spin against each other): so every job runs single-threaded, and
as many jobs run at once as there are cores. A job is one command; its output goes to a
log file, printed when it ends (so the outputs of parallel jobs never interleave), with its
wall and CPU seconds. Jobs start longest first (by the estimate each carries), after the
jobs they depend on; a failed job does not stop the others, and the dependants of a
failed job are skipped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

#: Environment of every job: one thread for torch, OpenMP and the BLAS libraries.
SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
#: Every job runs under this script, which waits for the processes the job orphans (a Flower
#: deployment's), so that their CPU time is the job's (:mod:`gradcore.book.reaper`).
REAPER = Path(__file__).with_name("reaper.py")
#: How many jobs run at once when the caller does not say (``--jobs``).
JOBS_VARIABLE = "GRADCORE_JOBS"


def default_workers() -> int:
    """``GRADCORE_JOBS`` if set, else the cores this process may run on."""
    value = os.environ.get(JOBS_VARIABLE, "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{JOBS_VARIABLE} must be a positive whole number, got {value!r}")
        return int(value)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class Job:
    """One command to run.

    Attributes
    ----------
    name : str
        Unique label, printed with its times.
    command : list of str
        The process to start (in ``cwd``).
    estimate : float
        Expected seconds. Jobs start in order of the longest chain of estimates they begin (the
        job's own and its dependents'), so the last job to end starts early, and so does a short
        job that longer ones wait for.
    after : tuple of str
        Names of jobs that must have succeeded first.
    environment : dict
        Variables added to the process's environment (over :data:`SINGLE_THREAD`); ``None`` removes
        one.
    quiet : bool
        Print only the last lines of the log on success (the whole log on failure).
    cores : float
        The share of a core the job keeps busy (1 for a torch job; less for one that mostly
        waits, e.g. on a Flower deployment's polling). Busy jobs start while fewer than
        ``workers`` of them run; jobs that mostly wait run beside them, as many at once as fill
        one core (:func:`_fits`), so their waiting never leaves a core idle at the end of a run.
    """

    name: str
    command: list
    estimate: float = 0.0
    after: tuple = ()
    environment: dict = field(default_factory=dict)
    quiet: bool = False
    cores: float = 1.0

    def __post_init__(self):
        if not 0 < self.cores <= 1:
            raise ValueError(f"job {self.name!r}: cores must lie in (0, 1], got {self.cores!r}")


@dataclass
class Outcome:
    """What one job did: ``status`` is ``"done"``, ``"FAILED"`` or ``"skipped"``."""

    name: str
    status: str
    wall: float = 0.0
    cpu: float = 0.0
    returncode: int | None = None
    log: str = ""


def _tail(text: str, lines: int) -> str:
    return "".join(text.splitlines(True)[-lines:])


def _wait_any(running: dict) -> tuple:
    """``(pid, status, rusage)`` of the first of ``running``'s processes to end (only those: never
    another child)."""
    while True:
        for pid in running:
            found, status, usage = os.wait4(pid, os.WNOHANG)
            if found:
                return found, status, usage
        time.sleep(0.1)


def critical_paths(jobs: list[Job]) -> dict:
    """``{name: seconds}``: each job's estimate plus the longest chain of jobs waiting on it.

    Starting jobs in this order (list scheduling by critical path) starts a short job early when
    long ones wait for it: the smoke runs' 5-s fixtures, ordered by their own estimate, started
    last and left the smoke runs (two minutes) running alone at the end of CI.
    """
    dependents: dict = {job.name: [] for job in jobs}
    for job in jobs:
        for name in job.after:
            dependents.setdefault(name, []).append(job)
    chains: dict = {}

    def chain(job: Job, seen: tuple = ()) -> float:
        if job.name in seen:
            cycle = " -> ".join((*seen, job.name))
            raise ValueError(f"jobs depend on each other in a cycle: {cycle}")
        if job.name not in chains:
            later = [chain(d, (*seen, job.name)) for d in dependents[job.name]]
            chains[job.name] = job.estimate + max(later, default=0.0)
        return chains[job.name]

    for job in jobs:
        chain(job)
    return chains


def _fits(job: Job, running: list[Job], workers: int) -> bool:
    """Whether ``job`` may start beside ``running``: a busy job (one core) while fewer than
    ``workers`` busy jobs run; a job that mostly waits while those that mostly wait keep less than
    one core busy with it.

    Under one shared count of cores the three Flower jobs (long walls, bursty) started last and the
    run ended on them beside one busy job (1f67d95). Their CPU was under-counted then (0.3-0.4 of
    a core, from wait4 without the processes Flower orphans); counted whole
    (:mod:`gradcore.book.reaper`), the Flower chapter uses about 1.1 cores alone. Beside two busy
    single-threaded jobs they share those jobs' cores, and no float changes with the scheduling.
    """
    if job.cores >= 1:
        return sum(1 for other in running if other.cores >= 1) < workers
    return sum(other.cores for other in running if other.cores < 1) + job.cores <= 1


def run(
    jobs: list[Job],
    workers: int | None = None,
    cwd: Path | None = None,
    log_dir: Path | None = None,
    echo=print,
) -> list[Outcome]:
    """Run ``jobs``, at most ``workers`` busy ones at once (and beside them those that mostly
    wait, :func:`_fits`); return their outcomes in the order they ended.

    CPU seconds are the job's and all its descendants' (a notebook's kernel included, and the
    processes it orphaned, which :mod:`gradcore.book.reaper` adopts and waits for), from
    ``os.wait4``. An interrupt stops every running job (its whole process group).
    """
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"job names must be unique: {names}")
    unknown = {dep for job in jobs for dep in job.after} - set(names)
    if unknown:
        raise ValueError(f"jobs depend on unknown jobs: {', '.join(sorted(unknown))}")
    workers = workers or default_workers()
    chains = critical_paths(jobs)
    waiting = sorted(jobs, key=lambda job: -chains[job.name])
    running: dict[int, tuple[Job, subprocess.Popen, float, object, Path]] = {}
    finished: dict[str, Outcome] = {}
    folder = tempfile.TemporaryDirectory(prefix="gradcore-jobs-") if log_dir is None else None
    logs = Path(folder.name) if folder else Path(log_dir)
    logs.mkdir(parents=True, exist_ok=True)
    try:
        while waiting or running:
            for job in list(waiting):
                if any(finished.get(dep) and finished[dep].status != "done" for dep in job.after):
                    waiting.remove(job)
                    finished[job.name] = Outcome(job.name, "skipped")
                    echo(
                        f"-- {job.name}: skipped "
                        f"({', '.join(d for d in job.after if finished[d].status != 'done')} did "
                        "not succeed)"
                    )
            ready = [job for job in waiting if all(dep in finished for dep in job.after)]
            for job in ready:
                if not _fits(job, [entry[0] for entry in running.values()], workers):
                    continue
                waiting.remove(job)
                path = logs / f"{job.name.replace('/', '_').replace(' ', '_')}.log"
                handle = open(path, "wb")
                environment = {
                    **os.environ,
                    **SINGLE_THREAD,
                    **job.environment,
                    "PYTHONUNBUFFERED": "1",
                }
                environment = {
                    key: value for key, value in environment.items() if value is not None
                }
                process = subprocess.Popen(
                    [sys.executable, str(REAPER), *job.command],
                    cwd=cwd,
                    env=environment,
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                running[process.pid] = (job, process, time.perf_counter(), handle, path)
                echo(f"== {job.name} (started; {len(running)} running)")
            if not running:
                continue
            pid, status, usage = _wait_any(running)
            job, process, started, handle, path = running.pop(pid)
            process.returncode = os.waitstatus_to_exitcode(status)
            handle.close()
            text = path.read_text(errors="replace")
            outcome = Outcome(
                job.name,
                "done" if process.returncode == 0 else "FAILED",
                time.perf_counter() - started,
                usage.ru_utime + usage.ru_stime,
                process.returncode,
                text,
            )
            finished[job.name] = outcome
            shown = (
                _tail(text, 8)
                if job.quiet and outcome.status == "done"
                else (text if outcome.status == "done" else _tail(text, 120))
            )
            if shown.strip():
                echo(shown.rstrip("\n"))
            echo(
                f"-- {job.name}: {outcome.status} in {outcome.wall:.1f} s (cpu {outcome.cpu:.1f} s)"
                + ("" if outcome.status == "done" else f", exit code {process.returncode}")
            )
    except BaseException:
        for job, process, *_ in running.values():
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for job, process, *_ in running.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        raise
    finally:
        if folder:
            folder.cleanup()
    return [finished[name] for name in finished]


def summary(outcomes: list[Outcome], wall: float) -> str:
    """A table of the jobs' wall and CPU seconds, slowest first, and the total."""
    lines = [f"{'job':<44} {'status':<8} {'wall s':>8} {'cpu s':>8}"]
    for outcome in sorted(outcomes, key=lambda o: -o.wall):
        lines.append(
            f"{outcome.name:<44} {outcome.status:<8} {outcome.wall:8.1f} {outcome.cpu:8.1f}"
        )
    cpu = sum(o.cpu for o in outcomes)
    lines.append(f"{'all jobs':<44} {'':<8} {wall:8.1f} {cpu:8.1f}")
    return "\n".join(lines)


def python(*arguments: str) -> list:
    """A command running this interpreter (the venv's)."""
    return [sys.executable, *arguments]
