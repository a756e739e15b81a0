"""The `gradcore` command: execute chapters, build and check the book.

gradcore list                                   chapters and their parameters
gradcore run CHAPTER [--profile ci|paper] [--smoke] [-p NAME VALUE ...]
gradcore smoke [--chapter NAME] [--data DIR]    every chapter's paper profile, budgets cut, on data
fixtures gradcore build [--no-execute]                   execute every chapter (ci), build
_build/html gradcore check [--exact]                        freshness, nbval, strict build, browser
check gradcore test                                   unit tests, smoke runs and every check (what
CI runs) gradcore browser                                check the built book's pages in headless
Chromium gradcore tolerances                             copy declared output tolerances into the
notebooks gradcore results                                write the front page's results at a glance
from the notebooks gradcore drift run LABEL [VAR=VALUE ...]        execute every chapter on another
float path gradcore drift report [LABEL ...]               how far those runs moved from notebooks/
gradcore seeds SEED [SEED ...] [--chapter NAME]  rerun chapters with other seeds: do the claims
hold?
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .. import claims
from . import execution, freshness, jobs, layout, notebooks, reproducibility, status
from .browser import browser_check

SANITIZE = "tests/nbval_sanitize.cfg"


def _root() -> Path:
    """The repository root: the nearest folder upwards holding _toc.yml or book/."""
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "_toc.yml").exists() or (folder / "book").is_dir():
            return folder
    raise layout.PipelineError("not inside the gradcore repository (no _toc.yml or book/ found)")


def _timed(label: str, fn, *args, **kwargs):
    print(f"== {label}", flush=True)
    t0 = time.perf_counter()
    ok = False
    try:
        result = fn(*args, **kwargs)
        ok = True
        return result
    finally:
        print(
            f"-- {label}: {'done' if ok else 'FAILED'} in {time.perf_counter() - t0:.1f} s",
            flush=True,
        )


def _tool(name: str) -> str:
    """An executable of this environment (the venv's), else from PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else (shutil.which(name) or name)


def _subprocess(cmd: list[str], root: Path, env=None) -> None:
    print("$ " + " ".join(cmd), flush=True)
    rc = subprocess.call(cmd, cwd=root, env=env)
    if rc != 0:
        raise layout.PipelineError(f"`{' '.join(cmd)}` exited with {rc}")


# ------------------------------------------------------------------------------------------ steps


def run_chapter(
    root: Path,
    chapter: str,
    profile: str,
    params: dict,
    smoke: bool = False,
    environment: dict | None = None,
    output: Path | None = None,
    cell_times: Path | None = None,
    record_smoke: bool = False,
) -> None:
    label = f"run {chapter} [{profile}{', smoke' if smoke else ''}]" + "".join(
        f" {k}={v}" for k, v in params.items()
    )
    times: list = []
    out = _timed(
        label,
        execution.execute,
        root,
        chapter,
        profile,
        params,
        smoke=smoke,
        environment=environment,
        output=output,
        cell_times=times,
        record_smoke=record_smoke,
    )
    print(f"wrote {out.relative_to(root) if out.is_relative_to(root) else out}")
    if cell_times is not None:
        import json

        cell_times.parent.mkdir(parents=True, exist_ok=True)
        cell_times.write_text(
            json.dumps(
                [{"cell": i, "source": line, "seconds": t} for i, line, t in times], indent=1
            )
        )


def build_book(root: Path) -> None:
    # --all: an incremental Sphinx build does not repeat an unchanged page's warnings, so a second
    # -W build would pass over them. -n (nitpicky): every cross-reference ({doc}, {numref}, {cite},
    # a role naming a Python object) must resolve, or the build fails.
    _subprocess(
        [_tool("jupyter-book"), "build", str(root), "--all", "-W", "-n", "--keep-going", "-q"], root
    )


def nbval(root: Path, exact: bool = False) -> None:
    """Re-execute the committed notebooks and compare their outputs.

    By default within each chapter's declared tolerance (:mod:`gradcore.book.nbval_tolerance`);
    ``exact``: character by character, for refactoring on the machine that made them.
    """
    notebooks = sorted(str(p.relative_to(root)) for p in (root / "notebooks").glob("*.ipynb"))
    if not notebooks:
        raise layout.PipelineError("no executed notebooks in notebooks/: run `gradcore build`")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "--nbval",
        *notebooks,
        "--nbval-current-env",
        "--nbval-sanitize-with",
        SANITIZE,
        "-p",
        "no:cacheprovider",
    ]
    if not exact:
        cmd += ["-p", "gradcore.book.nbval_tolerance"]
    with execution.kernel_env("ci") as env:
        _subprocess(cmd, root, env)


def fresh(root: Path) -> None:
    problems = freshness.freshness(root)
    for p in problems:
        print(f"stale: {p}")
    if problems:
        raise layout.PipelineError(f"{len(problems)} executed notebook(s) out of date with book/")
    print(f"{len(layout.chapters(root))} chapter(s) fresh")


def browser(root: Path) -> None:
    problems = browser_check(root)
    for problem in problems:
        print(f"problem: {problem}", flush=True)
    if problems:
        raise layout.PipelineError(f"browser check: {len(problems)} problem(s)")


# ------------------------------------------------------------------------------------------- jobs
# Everything `make book` and `make test` do runs as single-threaded processes, as many at once as
# there are cores (gradcore.book.jobs): the chapters, their output checks, the smoke runs, the unit
# tests.


def _gradcore(*arguments: str) -> list:
    return jobs.python("-m", "gradcore.book.cli", *arguments)


def _estimates(root: Path, profile: str = "ci") -> dict:
    """Seconds of each chapter's last run in ``profile`` (notebooks/status.json): the longest start
    first."""
    import json

    path = root / "notebooks" / "status.json"
    status = json.loads(path.read_text()) if path.exists() else {}
    return {chapter: runs.get(profile, {}).get("seconds", 60.0) for chapter, runs in status.items()}


def chapter_jobs(
    root: Path,
    names,
    params: dict | None = None,
    out_dir: Path | None = None,
    label: str = "run",
    environment: dict | None = None,
    times_dir: Path | None = None,
) -> list:
    """One job per chapter: ``gradcore run NAME`` (ci), into ``out_dir`` if given, else
    notebooks/."""
    estimates = _estimates(root)
    result = []
    for name in names:
        command = _gradcore(
            "run", name, *[x for k, v in (params or {}).items() for x in ("-p", k, str(v))]
        )
        if out_dir is not None:
            command += ["--output", str(out_dir / f"{name}.ipynb")]
        if times_dir is not None:
            command += ["--cell-times", str(times_dir / f"{name}.json")]
        result.append(
            jobs.Job(
                f"{label} {name}",
                command,
                estimates.get(name, 60.0),
                environment=dict(environment or {}),
                cores=layout.chapter_cores(root, name),
            )
        )
    return result


def smoke_jobs(
    root: Path,
    data: Path,
    names=None,
    fixtures: bool = True,
    workers: int | None = None,
    record: bool = False,
) -> list:
    """The fixtures (unless real data is given), then every chapter's paper profile with its budgets
    cut, in one kernel per core (``workers``; default: as many as run at once). ``record``: store
    each chapter's seconds in notebooks/status.json (profile ``paper-smoke``), the estimates the
    next split between kernels reads."""
    result = []
    after = ()
    if fixtures:
        result.append(
            jobs.Job(
                "smoke fixtures",
                jobs.python(
                    "-c",
                    "import sys; from pathlib import Path; from gradcore.book import fixtures; "
                    "fixtures.write_all(Path(sys.argv[1]))",
                    str(data),
                ),
                5.0,
                quiet=True,
            )
        )
        after = ("smoke fixtures",)
    estimates = _estimates(root, layout.SMOKE_PROFILE)
    environment = {"GRADCORE_DATA": str(data), "GRADCORE_THREADS": "1"}
    # The paper profile takes every core; smoke runs measure nothing, so they take one like every
    # job. Chapters that keep a core busy share a kernel, one group per core
    # (execution.execute_smoke_runs: each kernel's start and imports paid once); one that mostly
    # waits (Flower) runs on its own, beside them.
    names = list(names or layout.chapters(root))
    cores = {name: layout.chapter_cores(root, name) for name in names}
    cost = lambda group: sum(estimates.get(n, 20.0) for n in group)  # noqa: E731
    busy = sorted((n for n in names if cores[n] >= 1), key=lambda n: -cost([n]))
    groups: list[list[str]] = [[] for _ in range(min(len(busy), workers or jobs.default_workers()))]
    for name in busy:  # the longest first, each to the group with the least so far
        min(groups, key=cost).append(name)
    for group in [*groups, *([n] for n in names if cores[n] < 1)]:
        result.append(
            jobs.Job(
                f"smoke {', '.join(group)}",
                _gradcore(
                    "run",
                    *group,
                    "--profile",
                    "paper",
                    "--smoke",
                    *(["--record"] if record else []),
                ),
                cost(group),
                after,
                environment,
                cores=min(cores[n] for n in group),
            )
        )
    return result


def check_jobs(root: Path, exact: bool = False) -> list:
    """nbval of every committed notebook (one job each), the strict book build, then the browser
    check."""
    notebooks = sorted(p.relative_to(root) for p in (root / "notebooks").glob("*.ipynb"))
    if not notebooks:
        raise layout.PipelineError("no executed notebooks in notebooks/: run `gradcore build`")
    with execution.kernel_env("ci") as environment:
        kernel = {key: environment.get(key) for key in {*environment, "MPLBACKEND"}}
    estimates = _estimates(root)
    result = []
    for notebook in notebooks:
        command = jobs.python(
            "-m",
            "pytest",
            "--nbval",
            str(notebook),
            "--nbval-current-env",
            "--nbval-sanitize-with",
            SANITIZE,
            "-p",
            "no:cacheprovider",
        )
        if not exact:
            command += ["-p", "gradcore.book.nbval_tolerance"]
        result.append(
            jobs.Job(
                f"nbval {notebook.stem}",
                command,
                estimates.get(notebook.stem, 60.0),
                environment=kernel,
                quiet=True,
                cores=layout.chapter_cores(root, notebook.stem),
            )
        )
    result.append(
        jobs.Job("jupyter-book build -W", _gradcore("build", "--no-execute"), 60.0, quiet=True)
    )
    result.append(jobs.Job("browser check", _gradcore("browser"), 20.0, ("jupyter-book build -W",)))
    return result


def run_jobs(root: Path, job_list: list, workers: int | None, title: str) -> list:
    """Run ``job_list``, print its summary; raise PipelineError naming the jobs that did not
    succeed."""
    workers = workers or jobs.default_workers()
    print(f"== {title}: {len(job_list)} jobs, {workers} at a time, one thread each", flush=True)
    t0 = time.perf_counter()
    outcomes = jobs.run(job_list, workers, cwd=root, echo=lambda text: print(text, flush=True))
    wall = time.perf_counter() - t0
    print(jobs.summary(outcomes, wall), flush=True)
    failed = [o.name for o in outcomes if o.status != "done"]
    if failed:
        raise layout.PipelineError(
            f"{title}: {len(failed)} job(s) did not succeed: {', '.join(failed)}"
        )
    print(f"{title}: every job succeeded in {wall:.1f} s")
    return outcomes


# --------------------------------------------------------------------------------------- commands


def cmd_list(root: Path, args) -> int:
    found = layout.chapters(root)
    if not found:
        print("no chapters (book/*.md with a jupytext header)")
    for name, src in found.items():
        nb = layout.read_source(src)
        params = layout.parameters(nb, name)
        executed = root / "notebooks" / f"{name}.ipynb"
        print(
            f"{name:<16} {src.relative_to(root)}  ->  "
            f"{executed.relative_to(root) if executed.exists() else '(not executed)'}"
        )
        for key, value in params.items():
            print(f"    {key} = {value!r}")
    return 0


def cmd_run(root: Path, args) -> int:
    params = dict(args.param or [])
    if len(args.chapter) > 1:
        if not (args.smoke and args.profile == "paper") or params or args.output or args.cell_times:
            raise layout.PipelineError(
                "several chapters run in one kernel only as smoke runs: `gradcore run A B "
                "--profile paper --smoke`, without -p, --output or --cell-times"
            )
        written = _timed(
            f"smoke runs of {', '.join(args.chapter)} in one kernel",
            execution.execute_smoke_runs,
            root,
            args.chapter,
            record=args.record,
        )
        print("\n".join(f"wrote {path.relative_to(root)}" for path in written))
        return 0
    run_chapter(
        root,
        args.chapter[0],
        args.profile,
        params,
        smoke=args.smoke,
        output=Path(args.output).resolve() if args.output else None,
        cell_times=Path(args.cell_times).resolve() if args.cell_times else None,
        record_smoke=args.record,
    )
    return 0


def cmd_smoke(root: Path, args) -> int:
    """Every chapter's paper profile with its budgets cut, on data fixtures in the real formats.

    The fixtures (:mod:`gradcore.book.fixtures`) are written to ``_build/smoke/data`` and the
    kernels see them as ``GRADCORE_DATA``, unless ``--data`` names a folder holding the real data
    sets.
    """
    data = Path(args.data).expanduser().resolve() if args.data else root / layout.SMOKE_DIR / "data"
    if args.data and not data.is_dir():
        raise layout.PipelineError(f"--data {data}: no such folder")
    smoke = smoke_jobs(root, data, args.chapter, not args.data, args.jobs, args.record)
    run_jobs(root, smoke, args.jobs, "smoke runs")
    return 0


def cmd_build(root: Path, args) -> int:
    t0 = time.perf_counter()
    if not args.no_execute:
        run_jobs(root, chapter_jobs(root, layout.chapters(root)), args.jobs, "chapters (ci)")
    _timed("jupyter-book build", build_book, root)
    print(f"book built in {time.perf_counter() - t0:.1f} s: open {root / '_build/html/index.html'}")
    return 0


def cmd_browser(root: Path, args) -> int:
    browser(root)
    return 0


def _check(root: Path, args, extra: list) -> int:
    t0 = time.perf_counter()
    try:
        _timed("freshness", fresh, root)
    except layout.PipelineError as exc:
        print(f"gradcore: freshness: {exc}", file=sys.stderr, flush=True)
        print(f"check FAILED (freshness) in {time.perf_counter() - t0:.1f} s")
        return 1
    run_jobs(root, extra + check_jobs(root, exact=args.exact), args.jobs, "checks")
    print(f"check passed in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_check(root: Path, args) -> int:
    return _check(root, args, [])


def make_test_jobs(root: Path, workers: int | None = None) -> list:
    """The jobs ``make test`` runs besides the checks (:func:`check_jobs`): the unit tests, the
    Flower deployment tests, lint and the paper profiles' smoke runs (``bench/book_time.py --ci``
    times the same list)."""
    flower_tests = "tests/test_flower.py"

    def pytest(*targets: str) -> list:
        return jobs.python("-m", "pytest", *targets, "-q", "-p", "no:cacheprovider")

    # Estimates: CI on a clean clone, 2 cores (2026-12-05): 95 s and 57 s wall.
    unit = jobs.Job("unit tests", pytest("tests", "--ignore", flower_tests), 95.0, quiet=True)
    # The Flower tests mostly wait on a deployment's polling (SuperNodes sleep 3 s between pulls):
    # as their own job they take a share of a core, as the Flower chapter does, beside the others.
    flower = jobs.Job(
        "unit tests (Flower deployments)",
        pytest(flower_tests),
        57.0,
        quiet=True,
        cores=layout.chapter_cores(root, "what-protects-flower"),
    )
    # pyproject.toml's [tool.ruff] says what is checked; the package is also kept formatted.
    lint = jobs.Job("lint", jobs.python("-m", "ruff", "check", "gradcore", "tests", "bench"), 5.0)
    formatting = jobs.Job("format", jobs.python("-m", "ruff", "format", "--check", "gradcore"), 5.0)
    smoke = smoke_jobs(root, root / layout.SMOKE_DIR / "data", workers=workers)
    return [unit, flower, lint, formatting, *smoke]


def cmd_test(root: Path, args) -> int:
    """What CI runs: the unit tests, the paper profiles' smoke runs and every check, in one pool of
    jobs."""
    return _check(root, args, make_test_jobs(root, workers=args.jobs))


def cmd_tolerances(root: Path, args) -> int:
    changed = freshness.sync_tolerances(root)
    print(
        "\n".join(f"updated {path}" for path in changed)
        or "every notebook already carries its chapter's tolerances"
    )
    return 0


def cmd_results(root: Path, args) -> int:
    status.write_results_page(root)
    print(f"wrote {status.RESULTS_PAGE}")
    return 0


DRIFT_DIR = Path("notebooks") / "drift"


def cmd_drift(root: Path, args) -> int:
    if args.action == "run":
        return _drift_run(root, args.label, args.items, args.jobs)
    if args.log:
        return _drift_log_report(Path(args.log))
    return _drift_report(root, [args.label, *args.items] if args.label else [])


def _drift_log_report(path: Path) -> int:
    """Summarise a ``GRADCORE_DRIFT_LOG`` written by a ``gradcore check`` on another float path."""
    import json

    if not path.is_file():
        raise layout.PipelineError(
            f"no drift log at {path}: run `GRADCORE_DRIFT_LOG={path} gradcore check` first"
        )
    largest: dict = {}
    outside = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if not record["within"]:
            outside.append(record)
        elif record["size"] > largest.get((record["chapter"], record["kind"]), (0.0, None))[0]:
            largest[(record["chapter"], record["kind"])] = (record["size"], record)
    print(f"== {path}: largest move per chapter and kind of number (committed -> this run)")
    for (chapter, kind), (size, record) in sorted(largest.items()):
        moved = (
            f"{size:.3g} dB"
            if kind == "decibels"
            else f"{size:.3g}"
            if kind == "fraction"
            else f"{100 * size:.3g}%"
        )
        print(
            f"   {chapter:<20} {kind:<10} {moved:>10}  cell {record['cell']}, "
            f"{record['where'][:60]}: {record['stored']!s} -> {record['new']!s}"
        )
    for record in outside:
        print(
            f"   {record['chapter']} cell {record['cell']}: OUTSIDE the tolerance: "
            f"{record['kind']} {record['stored']} -> {record['new']} (allowed {record['allowed']}) "
            f"at {record['where'][:80]}"
        )
    return 1 if outside else 0


def _drift_run(
    root: Path, label: str | None, assignments: list[str], jobs_option: int | None = None
) -> int:
    if not label or not label.replace("-", "").replace("_", "").isalnum():
        raise layout.PipelineError(
            f"drift run needs a LABEL of letters, digits, - and _ (got {label!r})"
        )
    environment = {}
    for item in assignments:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise layout.PipelineError(f"drift run: {item!r} is not VAR=VALUE")
        environment[name] = value
    out = root / DRIFT_DIR / label
    run_jobs(
        root,
        chapter_jobs(
            root,
            layout.chapters(root),
            out_dir=out,
            label=f"run [{label}]",
            environment=environment,
        ),
        jobs_option,
        f"drift run {label}",
    )
    print(f"wrote {out.relative_to(root)}/: compare with `gradcore drift report {label}`")
    return 0


SEEDS_DIR = Path("notebooks") / "seeds"


def cmd_seeds(root: Path, args) -> int:
    """Execute chapters (ci) with other seeds into notebooks/seeds/seed-N/ and count, per claim, the
    seeds it held at.

    Claims are reported, not asserted, in these runs (``claims.REPORT_VARIABLE``): a chapter
    runs to its end, and every claim gets a verdict at every seed. The per-chapter counts go
    to ``notebooks/seeds.json`` (merged with earlier runs of other chapters), which the Status
    page shows.
    """
    import json

    names = args.chapter or list(layout.chapters(root))
    started = time.time()
    report = {claims.REPORT_VARIABLE: "1"}
    job_list = [
        job
        for seed in args.seeds
        for job in chapter_jobs(
            root,
            names,
            {"seed": seed},
            root / SEEDS_DIR / f"seed-{seed}",
            f"seed {seed}:",
            environment=report,
        )
    ]
    try:
        run_jobs(root, job_list, args.jobs, f"chapters at seeds {', '.join(map(str, args.seeds))}")
    except layout.PipelineError as exc:
        print(exc)
    summary_path = root / "notebooks" / "seeds.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    shaky = 0
    for chapter in names:
        runs = {}
        for seed in args.seeds:
            path = root / SEEDS_DIR / f"seed-{seed}" / f"{chapter}.ipynb"
            if path.exists() and path.stat().st_mtime >= started:
                runs[seed] = claims.claims_in_notebook(path)
        records = claims.seed_summary(runs)
        everywhere = [r for r in records if len(r["held"]) == len(args.seeds)]
        never_asserted = [r for r in records if len(r["not reproduced"]) == len(args.seeds)]
        failing = [r for r in records if r["failed"] or r["missing"]]
        shaky += len(failing) + (len(runs) < len(args.seeds))
        print(
            f"\n== {chapter}: {len(runs)} of {len(args.seeds)} runs completed; {len(everywhere)} "
            f"of {len(records)} claims held at every seed, {len(never_asserted)} not reproduced at "
            "every seed"
        )
        for record in records:
            verdicts = f"held {len(record['held'])}, not reproduced {len(record['not reproduced'])}"
            if record["failed"] or record["missing"]:
                print(
                    f"   FAILED at seeds {record['failed'] + record['missing']} ({verdicts}): "
                    f"{record['claim'][:100]}"
                )
        summary[chapter] = {
            "seeds": list(args.seeds),
            "runs completed": len(runs),
            "claims": len(records),
            "held at every seed": len(everywhere),
            "not reproduced at every seed": len(never_asserted),
            "failed somewhere": [
                {"claim": r["claim"], "failed": r["failed"], "missing": r["missing"]}
                for r in failing
            ],
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "commit": _commit(root),
        }
    notebooks.write_text_atomically(
        summary_path, json.dumps(dict(sorted(summary.items())), indent=1) + "\n"
    )
    status_path = root / "notebooks" / "status.json"
    if status_path.exists():
        status.write_status_page(root, json.loads(status_path.read_text()))
    print(f"\nwrote {summary_path.relative_to(root)}")
    print(
        "\nevery claim held at every seed"
        if not shaky
        else f"\n{shaky} claim(s) or run(s) did not hold at every seed"
    )
    return 1 if shaky else 0


def _commit(root: Path) -> str:
    """The code the seeds ran on (short commit, "+ changes" if the tree was dirty), so a reader can
    tell
    whether a claim's count predates a later change to it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "not recorded"
    return head + (" + changes" if dirty else "")


def _drift_report(root: Path, labels: list[str]) -> int:
    import nbformat

    base = root / DRIFT_DIR
    labels = labels or sorted(p.name for p in base.glob("*") if p.is_dir())
    if not labels:
        raise layout.PipelineError(
            f"no drift runs in {DRIFT_DIR}/: `gradcore drift run LABEL VAR=VALUE ...` first"
        )
    clean = reproducibility.sanitizer(root / SANITIZE)
    failed = 0
    for label in labels:
        if not (base / label).is_dir():
            raise layout.PipelineError(f"no drift run {label!r} in {DRIFT_DIR}/")
        report = reproducibility.measure_drift(root / "notebooks", base / label, label, clean)
        print(f"\n== {label}: largest move per chapter and kind of number (committed -> {label})")
        print(f"   {'chapter':<20} {'kind':<10} {'moved':>10} {'allowed':>22}  where")
        for chapter, kinds in report.largest().items():
            tolerance = reproducibility.chapter_tolerance(
                nbformat.read(root / "notebooks" / f"{chapter}.ipynb", 4).metadata
            )
            for kind, (size, drift) in sorted(kinds.items()):
                moved = (
                    f"{size:.3g} dB"
                    if kind == "decibels"
                    else f"{size:.3g}"
                    if kind == "fraction"
                    else f"{100 * size:.3g}%"
                )
                outside = not tolerance.allows(kind, drift.stored, drift.new)
                failed += outside
                print(
                    f"   {chapter:<20} {kind:<10} {moved:>10} {tolerance.describe(kind):>22}  "
                    f"{drift.where[:70]}: {drift.stored:g} -> "
                    f"{drift.new:g}{'  OUTSIDE the tolerance' if outside else ''}"
                )
        for chapter, differences in report.differences.items():
            for difference in differences:
                failed += 1
                print(f"   {chapter}: not a number drift: {difference}")
    return 1 if failed else 0


def add_jobs(subparser: argparse.ArgumentParser) -> None:
    """The ``--jobs`` option every subcommand that runs chapters or checks in parallel shares."""
    subparser.add_argument(
        "--jobs",
        type=int,
        help="processes at once, one thread each "
        "(default: GRADCORE_JOBS, else the number of cores)",
    )


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="gradcore", description="Execute, build and check the gradcore book."
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list the chapters and their parameters")
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser(
        "run",
        help="execute one chapter into notebooks/",
        description="Execute book/CHAPTER.md. The default run writes notebooks/CHAPTER.ipynb "
        "(committed, checked, published); other profiles or parameters write "
        "notebooks/PROFILE/CHAPTER.ipynb.",
    )
    p.add_argument(
        "chapter",
        nargs="+",
        help="the chapter; several only with --profile paper --smoke (one kernel for all)",
    )
    p.add_argument("--profile", default="ci", help="ci (default, what CI checks) or paper")
    p.add_argument(
        "-p",
        "--param",
        nargs=2,
        action="append",
        metavar=("NAME", "VALUE"),
        help="override a parameter of the chapter's parameters cell (repeatable)",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="with --profile paper: every budget cut to the least that runs the paper's code "
        "paths, claims not asserted, written to _build/smoke/CHAPTER.ipynb",
    )
    p.add_argument(
        "--output", help="write the executed notebook here instead (the Status page is left alone)"
    )
    p.add_argument("--cell-times", help="write each code cell's wall seconds here (JSON)")
    p.add_argument(
        "--record",
        action="store_true",
        help="with --smoke: store the run's seconds in notebooks/status.json (profile paper-smoke)",
    )
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser(
        "smoke",
        help="every chapter's paper profile, budgets cut, on data fixtures (what CI runs)",
        description="Executes each chapter with --profile paper --smoke into _build/smoke/: the "
        "paper's models, shapes, data sets and code paths with every budget cut, claims not "
        "asserted. CIFAR-10/100 and an image folder are written as fixtures in their real formats "
        "to _build/smoke/data (GRADCORE_DATA) unless --data names real ones.",
    )
    p.add_argument(
        "--chapter", action="append", help="only this chapter (repeatable); default: all"
    )
    p.add_argument(
        "--data", help="a folder holding cifar-10-batches-py/ etc. (default: write fixtures)"
    )
    p.add_argument(
        "--record",
        action="store_true",
        help="store each chapter's seconds in notebooks/status.json (profile paper-smoke): the "
        "estimates by which the chapters are split between kernels",
    )
    add_jobs(p)
    p.set_defaults(fn=cmd_smoke)

    p = sub.add_parser("build", help="execute every chapter (ci profile), then build _build/html")
    p.add_argument(
        "--no-execute", action="store_true", help="build from the committed notebooks only"
    )
    add_jobs(p)
    p.set_defaults(fn=cmd_build)

    p = sub.add_parser("check", help="freshness, nbval, jupyter-book build -W, browser check")
    p.add_argument(
        "--exact",
        action="store_true",
        help="compare outputs character by character (only the machine type that made them passes)",
    )
    add_jobs(p)
    p.set_defaults(fn=cmd_check)

    p = sub.add_parser(
        "test",
        help="what CI runs: unit tests, smoke runs, freshness, nbval, strict build, browser check",
        description="Everything `make test` checks, as one pool of single-threaded jobs: the unit "
        "tests, the paper profiles' smoke runs, nbval of every notebook, the strict book build and "
        "the browser check.",
    )
    p.add_argument("--exact", action="store_true", help="compare outputs character by character")
    add_jobs(p)
    p.set_defaults(fn=cmd_test)

    p = sub.add_parser(
        "browser", help="open every page of the built book in headless Chromium and check it"
    )
    p.set_defaults(fn=cmd_browser)

    p = sub.add_parser(
        "tolerances",
        help="copy each chapter's declared output tolerances into its notebook",
        description="Tolerances configure the output check, not the outputs: after changing one in "
        "book/NAME.md, this writes it into notebooks/NAME.ipynb without re-executing.",
    )
    p.set_defaults(fn=cmd_tolerances)

    p = sub.add_parser(
        "results",
        help="write notebooks/results.md (the front page's claims summary) from the notebooks",
        description="Counts, per chapter, the claims that held and the rows marked `not "
        "reproduced` in the executed notebooks, and lists the latter with their reasons. `gradcore "
        "run` rewrites it after each ci run; `gradcore check` fails when it is stale.",
    )
    p.set_defaults(fn=cmd_results)

    p = sub.add_parser(
        "drift",
        help="measure how far the chapters' numbers move on another float path",
        description="`drift run LABEL VAR=VALUE ...` executes every chapter (ci) with those "
        "environment variables (e.g. ATEN_CPU_CAPABILITY=default, MKL_CBWR=COMPATIBLE, "
        "GRADCORE_THREADS=1) into notebooks/drift/LABEL/; `drift report [LABEL ...]` prints, per "
        "chapter and kind of number, the largest move from the committed notebooks beside the "
        "declared tolerance.",
    )
    p.add_argument("action", choices=("run", "report"))
    p.add_argument("label", nargs="?")
    p.add_argument("items", nargs="*", metavar="VAR=VALUE")
    p.add_argument(
        "--log", help="with report: summarise a GRADCORE_DRIFT_LOG file instead of notebooks/drift/"
    )
    add_jobs(p)
    p.set_defaults(fn=cmd_drift)

    p = sub.add_parser(
        "seeds",
        help="rerun chapters with other seeds and report whether their claims hold",
        description="Executes each chapter (ci) with `seed` set to each SEED into "
        "notebooks/seeds/seed-SEED/ (never over the committed notebooks) and prints, per chapter, "
        "how many claims held and the rows closest to failing.",
    )
    p.add_argument("seeds", nargs="+", type=int, metavar="SEED")
    p.add_argument(
        "--chapter", action="append", help="only this chapter (repeatable); default: all"
    )
    add_jobs(p)
    p.set_defaults(fn=cmd_seeds)
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(_root(), args)
    except layout.PipelineError as exc:
        print(f"gradcore: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gradcore: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
