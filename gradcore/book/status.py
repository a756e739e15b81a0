"""Where the numbers came from (the Status page) and what reproduces (the results page)."""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import platform
import re
from importlib import metadata
from pathlib import Path

from .. import claims
from . import reproducibility
from .layout import DEFAULT_PROFILE, SMOKE_PROFILE, chapters, toc_pages
from .notebooks import write_text_atomically

# ----------------------------------------------------------------------------------------- status


_device_cache: list = []

#: Environment variables that change the CPU's floating-point path (and so the printed numbers).
FLOAT_PATH_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "GRADCORE_THREADS", "OMP_NUM_THREADS")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(environment: dict | None = None) -> dict:
    """Where the numbers come from: torch version, device, CPU, torch's SIMD level and BLAS.

    The committed notebooks reproduce bit for bit only on the same float path; the Status page
    shows it so a reader knows where the committed numbers came from. ``environment``: the
    variables the numbers were computed under (a kernel's; this process's by default).
    """
    if not _device_cache:
        found = {
            "torch": "none",
            "device": "cpu",
            "cpu": _cpu_model(),
            "capability": "n/a",
            "blas": "n/a",
        }
        try:
            found["torch"] = metadata.version("torch")
            import torch

            found["capability"] = torch.backends.cpu.get_cpu_capability()
            config = torch.__config__.show()
            blas = re.search(r"BLAS_INFO=(\w+)", config)
            mkl = re.search(r"Math Kernel Library Version ([\w.]+)", config)
            found["blas"] = (blas.group(1) if blas else "unknown") + (
                f" {mkl.group(1)}" if mkl else ""
            )
            found["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        except metadata.PackageNotFoundError:
            pass
        except Exception:  # a broken CUDA setup still runs on the cpu
            pass
        _device_cache.append(found)
    environment = os.environ if environment is None else environment
    environment = {key: environment[key] for key in FLOAT_PATH_VARIABLES if key in environment}
    return {
        **_device_cache[0],
        "float_path": " ".join(f"{k}={v}" for k, v in environment.items()) or "default",
    }


def record(
    root,
    chapter: str,
    profile: str,
    injected: dict,
    seconds: float,
    path: Path,
    environment: dict | None = None,
) -> None:
    """Store the run in notebooks/status.json (last run per chapter and profile) and status.md.

    ``environment``: the kernel's, whose float path (thread count included) the Status page shows.
    """
    root = Path(root)
    status_path = root / "notebooks" / "status.json"
    # Chapters run in parallel each rewrite the whole file: hold a lock for the read-modify-write.
    with open(status_path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _record_locked(root, status_path, chapter, profile, injected, seconds, path, environment)


def _record_locked(
    root: Path,
    status_path: Path,
    chapter: str,
    profile: str,
    injected: dict,
    seconds: float,
    path: Path,
    environment: dict | None,
) -> None:
    status = json.loads(status_path.read_text()) if status_path.exists() else {}
    found = machine(environment)
    params = {k: v for k, v in injected.items() if k != "profile"}
    status.setdefault(chapter, {})[profile] = {
        "chapter": chapter,
        "profile": profile,
        "parameters": params,
        "notebook": str(path.relative_to(root)),
        "seconds": round(seconds, 1),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        **found,
    }
    status = {c: dict(sorted(p.items())) for c, p in sorted(status.items())}
    write_text_atomically(status_path, json.dumps(status, indent=1, sort_keys=True) + "\n")
    write_status_page(root, status)
    if (
        profile == DEFAULT_PROFILE
        and path == root / "notebooks" / f"{chapter}.ipynb"
        and (root / "_toc.yml").exists()
    ):
        write_results_page(root)


def write_status_page(root, status: dict) -> None:
    """notebooks/status.md: each chapter's last run per profile, the machines they ran on (one
    key each, so the table fits a page), the recorded smoke runs apart, then the seed reruns."""
    rows = [
        "# Status",
        "",
        "The last execution of each chapter: the book shows the `ci` notebooks; `paper` runs are "
        "in",
        "`notebooks/paper/`. Regenerate with `gradcore run CHAPTER` or `make book`.",
        "",
        "Printed numbers reproduce bit for bit only on the same floating-point path (CPU, torch's",
        "SIMD level, BLAS, threads); elsewhere `gradcore check` compares them within each "
        "chapter's",
        "declared tolerance (README, \"Testing\"). Dates are UTC. The Machine column names the",
        "machine and float path of the run; the list under the table spells each out.",
        "",
        "| Chapter | Profile | Parameters | Time | Date | Claims held / not reproduced | Machine |",
        "| --- | --- | --- | ---: | --- | --- | --- |",
    ]
    machines: dict[str, str] = {}
    smoke = []
    for chapter, profiles in status.items():
        for profile, r in profiles.items():
            if profile == SMOKE_PROFILE:
                smoke.append(f"| {chapter} | {_seconds(r)} | {_date(r)} |")
                continue
            params = (
                ", ".join(f"`{k}={v!r}`" for k, v in r.get("parameters", {}).items()) or "default"
            )
            held = _verdict_counts(
                Path(root)
                / "notebooks"
                / (f"{chapter}.ipynb" if profile == "ci" else f"{profile}/{chapter}.ipynb")
            )
            key = machines.setdefault(_machine(r), f"M{len(machines) + 1}")
            rows.append(
                f"| {chapter} | {profile} | {params} | {_seconds(r)} | {_date(r)} | {held} "
                f"| {key} |"
            )
    rows += ["", *(f"- **{key}**: {machine}" for machine, key in machines.items())]
    if smoke:
        rows += [
            "",
            "## Smoke runs",
            "",
            "The last recorded smoke run of each chapter (`gradcore smoke --record`): the paper's",
            "code paths with every budget cut, nothing measured. Their times only decide how CI "
            "splits",
            "the smoke runs between kernels.",
            "",
            "| Chapter | Time | Date |",
            "| --- | ---: | --- |",
            *smoke,
        ]
    rows += _seed_rows(Path(root) / "notebooks" / "seeds.json")
    write_text_atomically(Path(root) / "notebooks" / "status.md", "\n".join(rows) + "\n")


# No-break spaces: a narrow column would otherwise wrap "421 s", and a date between day and time.
def _seconds(run: dict) -> str:
    return f"{run['seconds']:.0f}\u00a0s"


def _date(run: dict) -> str:
    return run["date"].removesuffix(" UTC").replace(" ", "\u00a0")


def _machine(run: dict) -> str:
    """One run's machine and float path, as the Status page spells it out."""
    return (
        f"{run['device']}; {run.get('cpu', 'CPU not recorded')}; {run.get('capability', '?')} / "
        f"{run.get('blas', '?')}; float path {run.get('float_path', 'not recorded')}; Python "
        f"{run['python']}, torch {run['torch']}"
    )


def _verdict_counts(path: Path) -> str:
    """ "held / not reproduced" over the claims tables a notebook shows; "n/a" if it has none."""
    if not path.exists():
        return "n/a"
    verdicts = [
        row[table["header"].index("holds")]
        for table in claims.claims_in_notebook(path)
        for row in table["rows"]
    ]
    return f"{verdicts.count('yes')} / {verdicts.count('n/a')}" if verdicts else "n/a"


def _seed_rows(path: Path) -> list[str]:
    """The Status page's section on other seeds, from ``gradcore seeds`` (notebooks/seeds.json)."""
    if not path.exists():
        return []
    summary = json.loads(path.read_text())
    rows = [
        "",
        "## Claims at other seeds",
        "",
        "`gradcore seeds SEED ...` reruns the chapters with other seeds, claims reported rather "
        "than",
        "asserted, and counts per claim the seeds it held at. A claim that fails at any seed tried "
        "is",
        "named below. The Code column names the commit the seeds ran on: a claim changed since (a",
        "chapter's later commits) is counted as it was then.",
        "",
        "| Chapter | Seeds tried | Runs completed | Claims | Held at every seed | Not reproduced "
        "at every seed | Failed at some seed | Date | Code |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    failures = []
    for chapter, record in summary.items():
        failed = record["failed somewhere"]
        rows.append(
            f"| {chapter} | {', '.join(map(str, record['seeds']))} | {record['runs completed']} | "
            f"{record['claims']} | {record['held at every seed']} | "
            f"{record['not reproduced at every seed']} | {len(failed)} | {record['date']} | "
            f"{record.get('commit', 'not recorded')} |"
        )
        failures += [
            f"- {chapter}: {item['claim']} (failed at seeds "
            f"{', '.join(map(str, item['failed'] + item['missing']))})"
            for item in failed
        ]
    return rows + ([""] + failures if failures else [])


# ----------------------------------------------------------------------------- results at a glance

#: The front page's summary of what reproduces, written from the executed notebooks' claims tables.
RESULTS_PAGE = Path("notebooks") / "results.md"


def _chapter_title(path: Path) -> str:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell.get("source", "")).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return path.stem


def _escape_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def results_page(root) -> str:
    """The book's results at a glance (Markdown), counted from the claims tables the notebooks show.

    Per chapter, in the order of ``_toc.yml``: how many claims held, how many the chapter marks
    `not reproduced`, how many failed (none in a committed notebook: a failing claim stops the
    chapter) and how many are fragile (they hold by less than the drift the chapter's tolerance
    allows: :func:`gradcore.book.reproducibility.fragile_claims`); then every `not reproduced` row
    with its reason, and every fragile row with its margin. Nothing is typed by hand: the front page
    includes this file, and ``gradcore check`` fails when it no longer matches the notebooks.
    """
    root = Path(root)
    names = [page.split("/", 1)[1] for page in toc_pages(root) if page.startswith("notebooks/")]
    counts, missing, fragile = [], [], []
    for name in names:
        path = root / "notebooks" / f"{name}.ipynb"
        if name not in chapters(root) or not path.exists():
            continue
        notebook = json.loads(path.read_text(encoding="utf-8"))
        link = f"[{_escape_cell(_chapter_title(path))}](../notebooks/{name}.ipynb)"
        chapter_tolerance = reproducibility.chapter_tolerance(notebook.get("metadata", {}))
        verdicts, weak = {"yes": 0, "n/a": 0, "NO": 0}, 0
        for cell in notebook.get("cells", []):
            tolerance = reproducibility.cell_tolerance(chapter_tolerance, cell.get("metadata", {}))
            for output in cell.get("outputs", []):
                table = output.get("data", {}).get(reproducibility.TABLE_MIME)
                if not table or "holds" not in table.get("header", []):
                    continue
                column = table["header"].index("holds")
                for row in table["rows"]:
                    verdict = row[column]
                    verdicts[verdict if verdict in verdicts else "NO"] += 1
                    if verdict == "n/a":
                        reason = row[table["header"].index("test")].removeprefix(
                            claims.NOT_REPRODUCED_PREFIX
                        )
                        missing.append(
                            f"| {link} | {_escape_cell(row[0])} | {_escape_cell(row[1])} | "
                            f"{_escape_cell(row[2])} | {_escape_cell(reason)} |"
                        )
                for row in reproducibility.fragile_claims(table, tolerance):
                    weak += 1
                    fragile.append(
                        f"| {link} | {_escape_cell(row['claim'])} | {row['margin']:.3g} | "
                        f"{row['allowed']:.3g} ({row['kind']}) |"
                    )
        total = sum(verdicts.values())
        counts.append(
            f"| {link} | {total} | {verdicts['yes']} | {verdicts['n/a']} | {verdicts['NO']} | "
            f"{weak} |"
        )
    lines = [
        "| Chapter | Claims | Held | Not reproduced | Failed | Fragile |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        *counts,
    ]
    recorded = [(name, root / "notebooks" / f"{name}.ipynb") for name in DEPLOYMENT_CHAPTERS]
    recorded = [(name, path, recorded_findings(path)) for name, path in recorded if path.exists()]
    if any(summary for _, _, summary in recorded):
        lines += [
            "",
            "### What protects, and at what cost",
            "",
            "The key findings of the pages where every attack of the book meets every defense, as "
            "their",
            "notebooks last ran:",
        ]
        for name, path, summary in recorded:
            if summary:
                lines += [
                    "",
                    f"**[{_escape_cell(_chapter_title(path))}](../notebooks/{name}.ipynb)**",
                    "",
                    summary.strip(),
                ]
    if missing:
        lines += [
            "",
            "### What does not reproduce, and why",
            "",
            "Every row a chapter marks `not reproduced`, with what the source reports, what was "
            "measured",
            "here and the chapter's reason.",
            "",
            f"````{{dropdown}} The {len(missing)} rows marked not reproduced",
            "",
            "| Chapter | Claim | Source | Measured here | Why |",
            "| --- | --- | --- | --- | --- |",
            *missing,
            "````",
        ]
    if fragile:
        lines += [
            "",
            "### Fragile rows",
            "",
            "Rows that hold here by less than the drift their chapter allows on another CPU (the",
            "values the verdict compares may move by the chapter's declared tolerance for their "
            "kind,",
            "README, \"Testing\"): on a reader's machine these could flip. Rows whose values",
            "an identity or an analytic rule fixes (marked exact in their chapter) move by",
            "round-off only and are not counted.",
            "",
            f"````{{dropdown}} The {len(fragile)} fragile rows",
            "",
            "| Chapter | Claim | Margin | Allowed drift |",
            "| --- | --- | ---: | ---: |",
            *fragile,
            "````",
        ]
    return "\n".join(lines) + "\n"


#: The pages whose key findings the front page repeats: what protects a deployment, at what cost.
DEPLOYMENT_CHAPTERS = ("what-protects", "what-protects-epsilon")


def recorded_findings(path: Path, name: str = "findings") -> str | None:
    """The Markdown a notebook glued under ``name`` (:func:`gradcore.claims.glue_findings`), or
    None."""
    notebook = json.loads(Path(path).read_text(encoding="utf-8"))
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            if output.get("metadata", {}).get("scrapbook", {}).get("name") == name:
                text = output.get("data", {}).get("application/papermill.record/text/markdown")
                return "".join(text) if isinstance(text, list) else text
    return None


def write_results_page(root) -> None:
    write_text_atomically(Path(root) / RESULTS_PAGE, results_page(root))
