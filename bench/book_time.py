"""Where the time of `make book` and `make test` goes: every job's wall and CPU seconds, every chapter's slowest cells.

    python bench/book_time.py                      # the book: every chapter (ci), as `make book` runs them
    python bench/book_time.py --ci                 # and every other job of `make test` (unit tests, smoke runs,
                                                   # nbval, the strict build, the browser check)
    python bench/book_time.py --jobs 1             # one job at a time (each job's time alone)
    python bench/book_time.py --table              # print the README's timing table from the last result, run nothing

The same jobs, with the same commands, as ``gradcore build`` and ``gradcore test`` run
(:mod:`gradcore.book.jobs`: single-threaded processes, as many at once as there are cores). The
chapters execute into a temporary folder, so the committed notebooks stay as they are.
Prints the table the README's timings come from and writes ``bench/results/book_time.json``
with the machine's fingerprint (CPU, cores, torch, float path). Run it on an idle machine:
what else runs slows every job.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from _results import write_json

from gradcore.book import cli, jobs, layout, status

ROOT = Path(__file__).resolve().parents[1]


def fingerprint() -> dict:
    """The machine the times were measured on (the Status page's fields, and the cores)."""
    device = status.machine()
    return {**device, "cores": len(os.sched_getaffinity(0)), "python": sys.version.split()[0],
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def _chapter_of(job: str) -> tuple:
    """``("chapter", "dlg")`` / ``("nbval", "dlg")`` / ``("smoke", "dlg")`` for a job's name, else ``(job, "")``."""
    kind, _, name = job.partition(" ")
    if kind == "smoke" and ", " in name:  # several chapters' smoke runs in one kernel: a row of its own
        return (job, "")
    return (kind, name) if kind in ("chapter", "nbval", "smoke") and name else (job, "")


def markdown_table(result: dict) -> str:
    """The README's timing table: per chapter its `make book` run, its nbval check and its smoke run
    (wall / CPU seconds), then the other jobs of `make test`, each step's wall and CPU, and the machine."""
    rows, other = {}, []
    for step in result["steps"].values():
        for job in step["jobs"]:
            kind, name = _chapter_of(job["name"])
            (rows.setdefault(name, {}).__setitem__(kind, job) if name else other.append(job))
    seconds = lambda job: f"{job['wall']:.0f} / {job['cpu']:.0f}" if job else "-"
    lines = ["| chapter or job | `make book` run | nbval, or the `make test` job | smoke run |",
             "| --- | ---: | ---: | ---: |"]
    for name, kinds in sorted(rows.items(), key=lambda item: -(item[1].get("chapter") or {"cpu": 0})["cpu"]):
        lines.append(f"| {name} | {seconds(kinds.get('chapter'))} | {seconds(kinds.get('nbval'))} | "
                     f"{seconds(kinds.get('smoke'))} |")
    lines += [f"| {job['name']} | | {seconds(job)} | |" for job in other]
    for step, totals in result["steps"].items():
        label = "`make book`: all chapters" if step == "book" else "`make test` without the install: all jobs"
        lines.append(f"| **{label}** | | **{totals['wall']:.0f} / {totals['cpu']:.0f}** | |")
    machine = result["machine"]
    lines.append("")
    lines.append(f"Wall / CPU seconds, {result['workers']} jobs at a time; {machine['cpu']} ({machine['capability']}, "
                 f"{machine['blas']}), {machine['cores']} cores, torch {machine['torch']}, {machine['date']} "
                 "(`bench/results/book_time.json`).")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ci", action="store_true", help="also every other job of `make test`")
    ap.add_argument("--jobs", type=int, default=None, help="jobs at once (default: the number of cores)")
    ap.add_argument("--cells", type=int, default=5, help="slowest cells shown per chapter")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "book_time.json"))
    ap.add_argument("--table", action="store_true", help="print the README's table from --out and run nothing")
    args = ap.parse_args(argv)
    if args.table:
        print(markdown_table(json.loads(Path(args.out).read_text())))
        return 0
    workers = args.jobs or jobs.default_workers()
    os.environ.setdefault("PYTHONHASHSEED", "0")
    os.environ["OMP_NUM_THREADS"] = "1"
    with tempfile.TemporaryDirectory(prefix="gradcore-book-time-") as folder:
        folder = Path(folder)
        chapters = layout.chapters(ROOT)
        book = cli.chapter_jobs(ROOT, chapters, out_dir=folder / "notebooks", label="chapter",
                                times_dir=folder / "times")
        steps = {"book": book}
        if args.ci:
            steps["test"] = [*cli.make_test_jobs(ROOT, workers=workers), *cli.check_jobs(ROOT)]
        result = {"machine": fingerprint(), "workers": workers, "steps": {}}
        for step, job_list in steps.items():
            t0 = time.perf_counter()
            outcomes = jobs.run(job_list, workers, cwd=ROOT, echo=lambda line: None)
            wall = time.perf_counter() - t0
            print(f"\n== {step}: {len(job_list)} jobs, {workers} at a time, wall {wall:.1f} s\n")
            print(jobs.summary(outcomes, wall))
            result["steps"][step] = {"wall": round(wall, 1), "cpu": round(sum(o.cpu for o in outcomes), 1),
                                     "jobs": [{"name": o.name, "status": o.status, "wall": round(o.wall, 1),
                                               "cpu": round(o.cpu, 1)} for o in outcomes]}
            failed = [o for o in outcomes if o.status != "done"]
            for outcome in failed:
                print(f"\n{outcome.name} {outcome.status}:\n{outcome.log[-2000:]}")
        cells = {}
        for name in chapters:
            path = folder / "times" / f"{name}.json"
            if path.exists():
                cells[name] = sorted(json.loads(path.read_text()), key=lambda cell: -cell["seconds"])
        print("\n== slowest cells per chapter (wall s)")
        for name, timed in cells.items():
            print(f"{name}: {sum(c['seconds'] for c in timed):.1f} s in {len(timed)} cells")
            for cell in timed[: args.cells]:
                print(f"   {cell['seconds']:7.1f}  cell {cell['cell']:>3}  {cell['source'][:80]}")
        result["cells"] = {name: timed[: args.cells] for name, timed in cells.items()}
    print()
    write_json(Path(args.out), result)
    print("\n" + markdown_table(result))
    return 1 if any(o["status"] != "done" for s in result["steps"].values() for o in s["jobs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
