"""Execute, normalise, check and publish the book's chapters.

Layout (relative to a repository root):

* ``book/<name>.md``: a chapter, a MyST-markdown notebook with a jupytext header, one code cell
  tagged ``parameters`` that sets ``profile = "ci"``.
* ``notebooks/<name>.ipynb``: the chapter executed in the ci profile with default parameters (what
  is committed, checked by nbval and published).
* ``notebooks/<profile>/<name>.ipynb``: any other run (paper profile, changed parameters).
* ``notebooks/status.json`` / ``notebooks/status.md``: the last run of each chapter and profile.

Every function takes the repository root, so the tests can work on a copy in a temporary folder.
"""

from __future__ import annotations

import ast
import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import platform
import re
import tempfile
import time
from importlib import metadata
from pathlib import Path

from . import claims, reproducibility

# The profiles and the smoke switch are defined once, with the settings they select.
from .papers import PROFILES, SMOKE_VARIABLE

DEFAULT_PROFILE = "ci"
#: Smoke runs are written here, never over a notebook under notebooks/.
SMOKE_DIR = Path("_build") / "smoke"
INJECTED_TAG = "injected-parameters"
SLOW_CELL_SECONDS = 5.0  # `gradcore run` prints the cells that take longer, with their time

# Cell metadata keys written by nbclient/papermill that change on every run.
_VOLATILE_CELL_METADATA = ("execution", "papermill", "ExecuteTime")


class PipelineError(ValueError):
    """A user error or a failed chapter: the CLI prints the message, without a traceback."""


# --------------------------------------------------------------------------------------- chapters


def _front_matter(path: Path) -> dict:
    import yaml

    text = path.read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        return {}
    end = text.find("\n---", 4)
    if end < 0:
        return {}
    try:
        data = yaml.safe_load(text[4:end])
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def chapters(root) -> dict[str, Path]:
    """Chapter name -> source path: every ``book/*.md`` with a jupytext header, sorted by name."""
    book = Path(root) / "book"
    return {p.stem: p for p in sorted(book.glob("*.md")) if "jupytext" in _front_matter(p)}


def chapter_cores(root, name: str) -> float:
    """The share of a core the chapter keeps busy as it runs (front matter ``gradcore: cores:``, 1 if unset)."""
    found = chapters(root)
    if name not in found:
        return 1.0
    return float((_front_matter(found[name]).get("gradcore") or {}).get("cores", 1.0))


def chapter_source(root, name: str) -> Path:
    found = chapters(root)
    if name not in found:
        known = ", ".join(found) or "none (no book/*.md with a jupytext header)"
        raise PipelineError(f"unknown chapter {name!r}; known chapters: {known}")
    return found[name]


def read_source(path: Path):
    import jupytext

    return jupytext.read(path)


def _tags(cell) -> list:
    return list(cell.get("metadata", {}).get("tags", []))


def parameters_cell_index(nb, name: str = "chapter") -> int:
    found = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "parameters" in _tags(c)]
    if len(found) != 1:
        raise PipelineError(
            f"{name}: expected exactly one code cell tagged `parameters`, found {len(found)}"
        )
    return found[0]


def parameters(nb, name: str = "chapter") -> dict:
    """The chapter's parameters and their defaults, parsed from its ``parameters`` cell.

    Only plain ``NAME = <literal>`` assignments count (the values papermill can inject).
    """
    cell = nb.cells[parameters_cell_index(nb, name)]
    try:
        tree = ast.parse(cell.source)
    except SyntaxError as exc:
        raise PipelineError(f"{name}: the parameters cell is not valid Python: {exc}") from None
    params = {}
    for node in tree.body:
        target = getattr(node, "target", None) if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if not isinstance(target, ast.Name) or node.value is None:
            continue
        try:
            params[target.id] = ast.literal_eval(node.value)
        except ValueError:
            continue  # computed values cannot be parameters
    if params.get("profile") != DEFAULT_PROFILE:
        raise PipelineError(f'{name}: the parameters cell must set profile = "{DEFAULT_PROFILE}"')
    return params


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def convert(name: str, value, default):
    """Convert a command-line string to the type of the parameter's default (bool, int, float, str)."""
    if not isinstance(value, str):
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value
    try:
        if isinstance(default, bool):
            low = value.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
        if isinstance(default, str):
            return value
        if default is None:
            with contextlib.suppress(ValueError, SyntaxError):
                return ast.literal_eval(value)
            return value
        return type(default)(ast.literal_eval(value))
    except (ValueError, SyntaxError, TypeError):
        kind = type(default).__name__
        raise PipelineError(f"parameter {name}: {value!r} is not a valid {kind} (default {default!r})") from None


def _resolve(name: str, nb, profile: str, given: dict) -> tuple[dict, dict]:
    """Validate profile and parameters; return (defaults, parameters that differ from them)."""
    if profile not in PROFILES:
        raise PipelineError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    defaults = parameters(nb, name)
    if "profile" in given:
        raise PipelineError("set the profile with --profile, not as a parameter")
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        valid = ", ".join(f"{k} (default {v!r})" for k, v in defaults.items() if k != "profile")
        raise PipelineError(
            f"{name}: unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
            f"valid parameters: {valid or 'none'}"
        )
    values = {k: convert(k, v, defaults[k]) for k, v in given.items()}
    values["profile"] = profile
    changed = {k: v for k, v in values.items() if v != defaults[k]}
    return defaults, changed


# ---------------------------------------------------------------------------------- normalisation


def _collapse(text: str, keep_leading_cr: bool) -> str:
    """Keep, on each line, only what follows its last carriage return (tqdm's final frame).

    ``keep_leading_cr`` keeps a ``\\r`` in front of the first line when it had one: the stream
    continues an unterminated line of an earlier output of the same name, and nbval, which
    concatenates all outputs of one name, must still see that line overwritten.
    """
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if "\r" in line:
            tail = line.rsplit("\r", 1)[1]
            lines[i] = "\r" + tail if (i == 0 and keep_leading_cr) else tail
    return "\n".join(lines)


# Within a run of consecutive stream outputs, the order of stdout and stderr chunks is set by
# ipykernel's flush timers, not by the code (a print after a tqdm loop lands between the bar and
# its closing newline in one run, after it in the next): merge each name into one output, stderr
# (progress bars, warnings) first, so re-runs give the same notebook.
_STREAM_ORDER = {"stderr": 0, "stdout": 1}


def _normalise_outputs(outputs: list) -> list:
    result: list = []
    block: dict = {}

    def flush():
        for name in sorted(block, key=lambda n: (_STREAM_ORDER.get(n, 2), n)):
            result.append({"output_type": "stream", "name": name, "text": "".join(block[name])})
        block.clear()

    for out in outputs:
        if out.get("output_type") == "stream":
            block.setdefault(out["name"], []).append(out["text"])
        else:
            flush()
            out = dict(out)
            out.pop("transient", None)
            result.append(out)
    flush()
    previous: dict = {}
    for out in result:
        if out["output_type"] == "stream":
            name = out["name"]
            unterminated = name in previous and not previous[name].endswith("\n")
            previous[name] = out["text"]
            out["text"] = _collapse(out["text"], keep_leading_cr=unterminated)
    return result


def _cell_id(cell, seen: dict) -> str:
    key = hashlib.sha1(f"{cell['cell_type']}\0{cell['source']}".encode()).hexdigest()[:10]
    seen[key] = seen.get(key, 0) + 1
    return key if seen[key] == 1 else f"{key}-{seen[key]}"


def normalise(nb, source: str = "", profile: str = DEFAULT_PROFILE):
    """Make an executed notebook deterministic: ids, metadata, progress output."""
    import nbformat

    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    nb.nbformat, nb.nbformat_minor = 4, 5
    md = nb.metadata
    md.pop("jupytext", None)
    pm = md.pop("papermill", {}) or {}
    md["papermill"] = {"parameters": pm.get("parameters", {})}
    # The chapter's own gradcore metadata (its declared output tolerance) travels with it.
    md["gradcore"] = {**(md.get("gradcore") or {}), "source": source, "profile": profile}
    seen: dict = {}
    for cell in nb.cells:
        for key in _VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
        if cell.metadata.get("tags") == []:
            del cell.metadata["tags"]
        if cell.cell_type == "code":
            cell.outputs = [nbformat.from_dict(o) for o in _normalise_outputs(cell.get("outputs", []))]
        cell.id = _cell_id(cell, seen)
    return nb


def write_notebook(nb, path: Path) -> None:
    import nbformat

    text = nbformat.writes(nb)
    if not text.endswith("\n"):
        text += "\n"
    write_text_atomically(path, text)


def write_text_atomically(path: Path, text: str) -> None:
    """Write through a hidden temporary file renamed when complete, so an interrupted run never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


# -------------------------------------------------------------------------------------- execution


#: glibc's allocator settings for the kernels: blocks up to 32 MiB (its largest threshold) from the heap, never trimmed.
MALLOC_SETTINGS = {"MALLOC_MMAP_THRESHOLD_": str(2**25), "MALLOC_TRIM_THRESHOLD_": str(2**36)}


@contextlib.contextmanager
def kernel_env(profile: str = DEFAULT_PROFILE, environment: dict | None = None):
    """The environment every kernel runs in: papermill's here, nbval's in ``gradcore check``.

    The same thread count and hash seed on both sides keep printed numbers identical.
    ``MPLBACKEND=Agg`` would make inline figures vanish from the outputs, so it is dropped.
    ``environment`` adds variables (a drift measurement's float path).
    """
    saved = dict(os.environ)
    os.environ.update(environment or {})
    os.environ["GRADCORE_PROFILE"] = profile
    os.environ.setdefault("PYTHONHASHSEED", "0")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # glibc returns every large freed tensor to the system and faults its pages in again on the next
    # allocation; keeping freed memory in the heap makes the chapters 3-8% faster (numbers unchanged).
    for name, value in MALLOC_SETTINGS.items():
        os.environ.setdefault(name, value)
    if os.environ.get("MPLBACKEND", "").lower() in ("agg", "module://agg"):
        del os.environ["MPLBACKEND"]
    try:
        yield dict(os.environ)
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _stderr_to(path: Path):
    """Send file descriptor 2 (ours and the kernel's, which inherits it) to a file: the kernel's
    start-up and shutdown chatter; shown only when a run fails outside a cell."""
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "wb") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def output_path(root, name: str, profile: str, injected: dict) -> Path:
    """notebooks/NAME.ipynb for the default run, else notebooks/PROFILE/NAME.ipynb."""
    nbdir = Path(root) / "notebooks"
    if profile == DEFAULT_PROFILE and not injected:
        return nbdir / f"{name}.ipynb"
    return nbdir / profile / f"{name}.ipynb"


def _shown(path: Path, root: Path) -> str:
    """``path`` relative to the repository where it lies inside it, else as it is."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _first_line(source: str) -> str:
    for line in source.splitlines():
        if line.strip():
            return line.strip()
    return "(empty cell)"


def _locate(root: Path, src: Path, nb, index: int, exc) -> str:
    """``book/x.md:LINE`` of the failing cell's fence, and the failing line inside the cell."""
    ordinal = sum(c.cell_type == "code" for c in nb.cells[:index])
    fences = [i for i, line in enumerate(src.read_text().splitlines(), 1) if re.match(r"^`{3,}\{code-cell\}", line)]
    where = f"{src.relative_to(root)}:{fences[ordinal]}" if ordinal < len(fences) else str(src.relative_to(root))
    lines = re.findall(r"Cell In\[\d+\], line (\d+)", re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(exc.traceback)))
    return f"{where}, line {lines[0]} of the cell" if lines else where


def execute(root, chapter: str, profile: str = DEFAULT_PROFILE, parameters: dict | None = None,
            quiet: bool = False, output: Path | None = None, environment: dict | None = None,
            smoke: bool = False, cell_times: list | None = None) -> Path:
    """Execute one chapter; write and return its normalised notebook. Raises PipelineError.

    ``output``: write there instead of ``notebooks/`` and leave the Status page alone (a drift
    measurement, not a run of the book); ``environment``: variables the kernel runs with
    (``ATEN_CPU_CAPABILITY``, ``MKL_CBWR``, ``GRADCORE_THREADS``: another float path).
    ``smoke``: the paper profile with every budget cut (``gradcore.papers.Paper.smoke``) and the
    claims shown but not asserted, written to ``_build/smoke/CHAPTER.ipynb`` by default: it proves
    the paper's code paths run, and measures nothing. ``cell_times``: a list to append one
    ``(source cell index, first line, wall seconds)`` per executed code cell to.
    """
    if smoke:
        if profile != "paper":
            raise PipelineError(f"--smoke cuts the paper profile's budgets; it needs --profile paper, not {profile!r}")
        environment = {**(environment or {}), SMOKE_VARIABLE: "1"}
        output = output if output is not None else Path(root).resolve() / SMOKE_DIR / f"{chapter}.ipynb"
    import papermill
    from papermill.exceptions import PapermillExecutionError

    root = Path(root).resolve()
    src = chapter_source(root, chapter)
    nb = read_source(src)
    _, inject = _resolve(chapter, nb, profile, dict(parameters or {}))
    out = Path(output) if output is not None else output_path(root, chapter, profile, inject)
    nbdir = root / "notebooks"
    nbdir.mkdir(exist_ok=True)
    param_index = parameters_cell_index(nb, chapter)

    def source_index(index: int) -> int:  # index in the source (papermill inserts a cell)
        return index - 1 if inject and index > param_index + 1 else index

    started: dict = {}

    def on_cell_start(cell, cell_index):
        started[cell_index] = time.perf_counter()

    def on_cell_executed(cell, cell_index, execute_reply):
        seconds = time.perf_counter() - started.pop(cell_index, time.perf_counter())
        if cell_times is not None:
            cell_times.append((source_index(cell_index), _first_line(cell.source), round(seconds, 2)))
        if seconds >= SLOW_CELL_SECONDS and not quiet:
            print(f"   {seconds:7.1f} s  cell {source_index(cell_index)}  `{_first_line(cell.source)}`", flush=True)

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gradcore-") as tmp, kernel_env(profile, environment) as kernel_environment:
        log = Path(tmp) / "kernel.log"
        try:
            with _stderr_to(log):
                result = papermill.execute_notebook(
                    nb, str(Path(tmp) / f"{chapter}.ipynb"), parameters=inject or None, cwd=str(nbdir),
                    kernel_name="python3", progress_bar=False,
                    on_cell_start=on_cell_start, on_cell_executed=on_cell_executed,
                )
        except PapermillExecutionError as exc:
            index = exc.cell_index
            if inject and index == param_index + 1:
                where = "the injected parameters cell"
            else:
                index = source_index(index)
                where = f"cell {index} (`{_first_line(exc.source)}`, {_locate(root, src, nb, index, exc)})"
            raise PipelineError(
                f"{chapter} [{profile}] failed in {where}: {exc.ename}: {exc.evalue}\n"
                f"{_shown(out, root)} was left untouched."
            ) from None
        except Exception as exc:  # kernel died, timed out, could not start...
            tail = "".join(log.read_text(errors="replace").splitlines(True)[-20:])
            raise PipelineError(
                f"{chapter} [{profile}] failed: {type(exc).__name__}: {exc}\n"
                + (f"kernel stderr (last lines):\n{tail}" if tail.strip() else "")
                + f"{_shown(out, root)} was left untouched."
            ) from None
    seconds = time.perf_counter() - t0
    write_notebook(normalise(result, str(src.relative_to(root)), profile), out)
    if output is None:
        record(root, chapter, profile, inject, seconds, out, kernel_environment)
    return out


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
        found = {"torch": "none", "device": "cpu", "cpu": _cpu_model(), "capability": "n/a", "blas": "n/a"}
        try:
            found["torch"] = metadata.version("torch")
            import torch

            found["capability"] = torch.backends.cpu.get_cpu_capability()
            config = torch.__config__.show()
            blas = re.search(r"BLAS_INFO=(\w+)", config)
            mkl = re.search(r"Math Kernel Library Version ([\w.]+)", config)
            found["blas"] = (blas.group(1) if blas else "unknown") + (f" {mkl.group(1)}" if mkl else "")
            found["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        except metadata.PackageNotFoundError:
            pass
        except Exception:  # a broken CUDA setup still runs on the cpu
            pass
        _device_cache.append(found)
    environment = os.environ if environment is None else environment
    environment = {key: environment[key] for key in FLOAT_PATH_VARIABLES if key in environment}
    return {**_device_cache[0], "float_path": " ".join(f"{k}={v}" for k, v in environment.items()) or "default"}


def record(root, chapter: str, profile: str, injected: dict, seconds: float, path: Path,
           environment: dict | None = None) -> None:
    """Store the run in notebooks/status.json (last run per chapter and profile) and status.md.

    ``environment``: the kernel's, whose float path (thread count included) the Status page shows.
    """
    root = Path(root)
    status_path = root / "notebooks" / "status.json"
    # Chapters run in parallel each rewrite the whole file: hold a lock for the read-modify-write.
    with open(status_path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _record_locked(root, status_path, chapter, profile, injected, seconds, path, environment)


def _record_locked(root: Path, status_path: Path, chapter: str, profile: str, injected: dict, seconds: float, path: Path,
                   environment: dict | None) -> None:
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
    if profile == DEFAULT_PROFILE and path == root / "notebooks" / f"{chapter}.ipynb" and (root / "_toc.yml").exists():
        write_results_page(root)


def write_status_page(root, status: dict) -> None:
    rows = [
        "# Status",
        "",
        "The last execution of each chapter: the book shows the `ci` notebooks; `paper` runs are in",
        "`notebooks/paper/`. Regenerate with `gradcore run CHAPTER` or `make book`.",
        "",
        "Printed numbers reproduce bit for bit only on the same floating-point path (CPU, torch's",
        "SIMD level, BLAS, threads); elsewhere `gradcore check` compares them within each chapter's",
        "declared tolerance (README, \"Testing\").",
        "",
        "| Chapter | Profile | Parameters | Time | Date | Claims: held / not reproduced | Machine |",
        "| --- | --- | --- | ---: | --- | --- | --- |",
    ]
    for chapter, profiles in status.items():
        for profile, r in profiles.items():
            params = ", ".join(f"`{k}={v!r}`" for k, v in r.get("parameters", {}).items()) or "default"
            held = _verdict_counts(Path(root) / "notebooks" / (f"{chapter}.ipynb" if profile == "ci" else f"{profile}/{chapter}.ipynb"))
            machine = (f"{r['device']}; {r.get('cpu', 'CPU not recorded')}; {r.get('capability', '?')} / {r.get('blas', '?')}; "
                       f"float path {r.get('float_path', 'not recorded')}; Python {r['python']}, torch {r['torch']}")
            rows.append(f"| {chapter} | {profile} | {params} | {r['seconds']:.0f} s | {r['date']} | {held} | {machine} |")
    rows += _seed_rows(Path(root) / "notebooks" / "seeds.json")
    write_text_atomically(Path(root) / "notebooks" / "status.md", "\n".join(rows) + "\n")


def _verdict_counts(path: Path) -> str:
    """"held / not reproduced" over the claims tables a notebook shows; "n/a" if it has none."""
    if not path.exists():
        return "n/a"
    verdicts = [row[table["header"].index("holds")] for table in claims.claims_in_notebook(path) for row in table["rows"]]
    return f"{verdicts.count('yes')} / {verdicts.count('n/a')}" if verdicts else "n/a"


def _seed_rows(path: Path) -> list[str]:
    """The Status page's section on other seeds, from ``gradcore seeds`` (notebooks/seeds.json)."""
    if not path.exists():
        return []
    summary = json.loads(path.read_text())
    rows = ["", "## Claims at other seeds", "",
            "`gradcore seeds SEED ...` reruns the chapters with other seeds, claims reported rather than",
            "asserted, and counts per claim the seeds it held at. A claim that fails at any seed tried is",
            "named below. The Code column names the commit the seeds ran on: a claim changed since (a",
            "chapter's later commits) is counted as it was then.", "",
            "| Chapter | Seeds tried | Runs completed | Claims | Held at every seed | Not reproduced at every seed | Failed at some seed | Date | Code |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    failures = []
    for chapter, record in summary.items():
        failed = record["failed somewhere"]
        rows.append(f"| {chapter} | {', '.join(map(str, record['seeds']))} | {record['runs completed']} | {record['claims']} | "
                    f"{record['held at every seed']} | {record['not reproduced at every seed']} | {len(failed)} | {record['date']} | "
                    f"{record.get('commit', 'not recorded')} |")
        failures += [f"- {chapter}: {item['claim']} (failed at seeds {', '.join(map(str, item['failed'] + item['missing']))})"
                     for item in failed]
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
    allows: :func:`gradcore.reproducibility.fragile_claims`); then every `not reproduced` row with
    its reason, and every fragile row with its margin. Nothing is typed by hand: the front page
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
                        reason = row[table["header"].index("test")].removeprefix(claims.NOT_REPRODUCED_PREFIX)
                        missing.append(f"| {link} | {_escape_cell(row[0])} | {_escape_cell(row[1])} | "
                                       f"{_escape_cell(row[2])} | {_escape_cell(reason)} |")
                for row in reproducibility.fragile_claims(table, tolerance):
                    weak += 1
                    fragile.append(f"| {link} | {_escape_cell(row['claim'])} | {row['margin']:.3g} | "
                                   f"{row['allowed']:.3g} ({row['kind']}) |")
        total = sum(verdicts.values())
        counts.append(f"| {link} | {total} | {verdicts['yes']} | {verdicts['n/a']} | {verdicts['NO']} | {weak} |")
    lines = ["| Chapter | Claims | Held | Not reproduced | Failed | Fragile |",
             "| --- | ---: | ---: | ---: | ---: | ---: |", *counts]
    recorded = [(name, root / "notebooks" / f"{name}.ipynb") for name in DEPLOYMENT_CHAPTERS]
    recorded = [(name, path, recorded_findings(path)) for name, path in recorded if path.exists()]
    if any(summary for _, _, summary in recorded):
        lines += ["", "### What protects, and at what cost", "",
                  "The key findings of the pages where every attack of the book meets every defense, as their",
                  "notebooks last ran:"]
        for name, path, summary in recorded:
            if summary:
                lines += ["", f"**[{_escape_cell(_chapter_title(path))}](../notebooks/{name}.ipynb)**", "",
                          summary.strip()]
    if missing:
        lines += ["", "### What does not reproduce, and why", "",
                  "Every row a chapter marks `not reproduced`, with what the source reports, what was measured",
                  "here and the chapter's reason.", "",
                  f"````{{dropdown}} The {len(missing)} rows marked not reproduced", "",
                  "| Chapter | Claim | Source | Measured here | Why |", "| --- | --- | --- | --- | --- |", *missing, "````"]
    if fragile:
        lines += ["", "### Fragile rows", "",
                  "Rows that hold here by less than the drift their chapter allows on another CPU (the",
                  "values the verdict compares may move by the chapter's declared tolerance for their kind,",
                  "README, \"Testing\"): on a reader's machine these could flip.", "",
                  f"````{{dropdown}} The {len(fragile)} fragile rows", "",
                  "| Chapter | Claim | Margin | Allowed drift |", "| --- | --- | ---: | ---: |", *fragile, "````"]
    return "\n".join(lines) + "\n"


#: The pages whose key findings the front page repeats: what protects a deployment, at what cost.
DEPLOYMENT_CHAPTERS = ("what-protects", "what-protects-epsilon")


def recorded_findings(path: Path, name: str = "findings") -> str | None:
    """The Markdown a notebook glued under ``name`` (:func:`gradcore.claims.glue_findings`), or None."""
    notebook = json.loads(Path(path).read_text(encoding="utf-8"))
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            if output.get("metadata", {}).get("scrapbook", {}).get("name") == name:
                text = output.get("data", {}).get("application/papermill.record/text/markdown")
                return "".join(text) if isinstance(text, list) else text
    return None


def write_results_page(root) -> None:
    write_text_atomically(Path(root) / RESULTS_PAGE, results_page(root))


# -------------------------------------------------------------------------------------- freshness


def _cell_key(cell) -> tuple:
    tolerance = json.dumps(cell.get("metadata", {}).get("tolerance"), sort_keys=True)
    return cell.cell_type, cell.source.rstrip("\n"), tuple(sorted(_tags(cell))), tolerance


def freshness(root) -> list[str]:
    """Problems that make an executed notebook differ from its chapter source (empty if fresh).

    Every cell counts (code, prose and tags): nbval re-runs the code of the .ipynb and the book
    publishes the .ipynb, so a source edit that was never executed would go unnoticed otherwise.
    """
    import nbformat

    root = Path(root)
    problems = []
    for name, src in chapters(root).items():
        path = root / "notebooks" / f"{name}.ipynb"
        rerun = f"run `gradcore run {name}`"
        if not path.exists():
            problems.append(f"{name}: {path.relative_to(root)} is missing; {rerun}")
            continue
        executed = nbformat.read(path, as_version=4)
        injected = [i for i, c in enumerate(executed.cells) if INJECTED_TAG in _tags(c)]
        if injected:
            params = executed.metadata.get("papermill", {}).get("parameters", {})
            problems.append(
                f"{name}: {path.relative_to(root)} was executed with non-default parameters "
                f"({', '.join(f'{k}={v!r}' for k, v in params.items()) or 'see cell ' + str(injected[0])}); "
                f"CI checks the ci profile with default parameters: {rerun}"
            )
            continue
        source = read_source(src)
        declared = (source.metadata.get("gradcore") or {}).get("tolerance")
        if declared != (executed.metadata.get("gradcore") or {}).get("tolerance"):
            problems.append(f"{name}: the output tolerance in {src.relative_to(root)}'s front matter differs "
                            f"from {path.relative_to(root)}'s; {rerun}")
            continue
        source_cells = [_cell_key(c) for c in source.cells]
        executed_cells = [_cell_key(c) for c in executed.cells]
        for i, (a, b) in enumerate(zip(source_cells, executed_cells)):
            if a != b:
                what = a[0] if a[0] == b[0] else f"{a[0]} in the source, {b[0]} in the notebook"
                detail = (f"source has `{_first_line(a[1])}`" if a[:2] != b[:2]
                          else "tags differ" if a[2] != b[2] else "tolerance differs")
                problems.append(
                    f"{name}: cell {i} ({what}) differs from {src.relative_to(root)} ({detail}); {rerun}"
                )
                break
        else:
            if len(source_cells) != len(executed_cells):
                problems.append(
                    f"{name}: {src.relative_to(root)} has {len(source_cells)} cells, "
                    f"{path.relative_to(root)} has {len(executed_cells)}; {rerun}"
                )
    page = root / RESULTS_PAGE
    if (root / "_toc.yml").exists() and (not page.exists() or page.read_text() != results_page(root)):
        problems.append(f"{RESULTS_PAGE} does not match the notebooks' claims tables: run `gradcore results`")
    return problems


def sync_tolerances(root) -> list[str]:
    """Copy each chapter's declared output tolerances into its executed notebook.

    Tolerances configure the check, not the outputs, so a tolerance changed after a drift
    measurement needs no re-execution: the chapter's front matter (``gradcore: tolerance:``)
    and its cells' ``tolerance`` options are written into ``notebooks/NAME.ipynb`` as they
    are, outputs untouched. Returns the notebooks changed. A notebook whose cells no longer
    match its source is left alone and named in the error raised once the others are done
    (re-execute it instead).
    """
    import nbformat

    root = Path(root)
    changed, stale = [], []
    for name, src in chapters(root).items():
        path = root / "notebooks" / f"{name}.ipynb"
        if not path.exists():
            continue
        source, executed = read_source(src), nbformat.read(path, as_version=4)
        strip = lambda cell: _cell_key(cell)[:3]  # noqa: E731 - everything but the tolerance
        if [strip(c) for c in source.cells] != [strip(c) for c in executed.cells]:
            stale.append(f"{name}: {path.relative_to(root)} does not match {src.relative_to(root)} "
                         f"beyond tolerances; run `gradcore run {name}`")
            continue
        before = nbformat.writes(executed)
        declared = (source.metadata.get("gradcore") or {}).get("tolerance")
        executed.metadata.setdefault("gradcore", {}).pop("tolerance", None)
        if declared is not None:
            executed.metadata["gradcore"]["tolerance"] = declared
        for mine, theirs in zip(source.cells, executed.cells):
            theirs.metadata.pop("tolerance", None)
            if "tolerance" in mine.metadata:
                theirs.metadata["tolerance"] = mine.metadata["tolerance"]
        if nbformat.writes(executed) != before:
            write_notebook(executed, path)
            changed.append(str(path.relative_to(root)))
    if stale:
        done = f" (updated: {', '.join(changed)})" if changed else ""
        raise PipelineError("; ".join(stale) + done)
    return changed


# ---------------------------------------------------------------------------------------- the toc


def toc_pages(root) -> list[str]:
    """Document paths in _toc.yml order (without suffix), e.g. ["book/intro", "notebooks/dlg"]."""
    import yaml

    toc = yaml.safe_load((Path(root) / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                pages.append(entry["file"])
            for key in ("chapters", "sections"):
                walk(entry.get(key))
            for part in entry.get("parts", []):
                walk(part.get("chapters"))

    walk(toc.get("chapters"))
    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    return [re.sub(r"\.(md|ipynb)$", "", p) for p in pages]


# ------------------------------------------------------------------------------------ the browser


CHROMIUM = "/usr/bin/chromium"
#: The browser check's laptop screen is 1440x900; a page taller than MOST_SCREENS of them is split or folded.
SCREEN_HEIGHT = 900
MOST_SCREENS = 25
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
_ERROR_SELECTORS = ".output.traceback, .output.error, .system-message, .problematic, div.admonition.error"
_ERROR_TEXT = re.compile(r"Traceback \(most recent call last\)|\b[A-Z]\w*(Error|Exception): ")


def _png_outputs(path: Path) -> int:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


@contextlib.contextmanager
def _serve(directory: Path):
    """A static http server on 127.0.0.1 (loopback only), on a free port."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _page_problems(page, root: Path, doc: str) -> tuple[list[str], str, dict, dict]:
    """The browser check of one loaded page: its problems, a one-line summary, its claims rows, its results counts."""
    bad: list[str] = []
    if not page.locator("h1:visible").count():
        bad.append("no visible h1")
    n_err = page.locator(_ERROR_SELECTORS).count()
    if n_err:
        bad.append(f"{n_err} error element(s) ({_ERROR_SELECTORS})")
    outputs_text = " ".join(page.locator(".cell_output").all_inner_texts())
    match = _ERROR_TEXT.search(outputs_text)
    if match:
        bad.append(f"error text in an output: {match.group(0)!r}")
    images = page.evaluate(
        """async () => {
            const imgs = [...document.images];
            imgs.forEach(i => { i.loading = 'eager'; });
            await Promise.all(imgs.map(i => i.decode().catch(() => null)));
            return imgs.map(i => ({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0,
                                   output: !!i.closest('.cell_output'),
                                   captioned: !!(i.closest('figure') && i.closest('figure').querySelector('figcaption'))}));
        }"""
    )
    broken = [i["src"] for i in images if not i["ok"]]
    if broken:
        bad.append(f"{len(broken)} image(s) did not load: {', '.join(broken[:3])}")
    figures = sum(i["output"] for i in images)
    uncaptioned = sum(i["output"] and not i["captioned"] for i in images)
    if uncaptioned:
        bad.append(f"{uncaptioned} output figure(s) without a caption (add `:mystnb: figure: caption:` to the cell)")
    nb_path = root / f"{doc}.ipynb"
    if nb_path.exists():
        expected = _png_outputs(nb_path)
        if figures < expected:
            bad.append(f"{figures} output images rendered, the notebook has {expected}")
    math = page.evaluate(
        """async () => {
            const n = document.querySelectorAll('.math').length;
            if (!n) return {n: 0, rendered: 0, errors: 0};
            if (window.MathJax && MathJax.startup && MathJax.startup.promise)
                await MathJax.startup.promise;
            return {n, rendered: document.querySelectorAll('mjx-container').length,
                    errors: document.querySelectorAll('mjx-merror').length};
        }"""
    )
    if math["n"] and not math["rendered"]:
        bad.append(f"{math['n']} math element(s) but MathJax rendered none")
    if math["errors"]:
        bad.append(f"{math['errors']} TeX error(s) in the math")
    boxed = page.evaluate(_DARK_TABLES_JS)
    if boxed:
        bad.append(f"{boxed} output table(s) on a light box in dark mode (book/_static/gradcore.css)")
    claims = page.evaluate(_CLAIMS_ROWS_JS)
    if claims["unmarked"]:
        bad.append(f"{claims['unmarked']} claims row(s) without a verdict class (re-execute the chapter)")
    wide = page.evaluate(_WIDE_CODE_JS)
    if wide:
        bad.append(f"{len(wide)} shown code cell(s) wider than the column at this width, e.g. `{wide[0][:60]}` "
                   "(wrap the line, or hide the cell's input)")
    findings = page.evaluate(_FINDINGS_JS)
    if claims["rows"] and not (findings["found"] and findings["before"] and findings["items"]):
        bad.append("no key-findings box with its findings above the first code cell "
                   f"({findings}; claims.glue_findings at the end, the box before the parameters cell)")
    summary = page.evaluate(_RESULTS_SUMMARY_JS)
    screens = page.evaluate("document.documentElement.scrollHeight") / SCREEN_HEIGHT
    if screens > MOST_SCREENS:
        bad.append(f"{screens:.1f} screens tall at 1440x900, more than {MOST_SCREENS} (continue the chapter "
                   "on a sub-page, `sections` in _toc.yml, or fold long outputs)")
    label = (f"{figures} figure{'s' if figures != 1 else ''}, {math['rendered']} equations, "
             f"{screens:.1f} screens")
    return bad, label, claims, summary


def browser_check(root, html_dir=None, screenshots=None) -> list[str]:
    """Open every page of the toc in headless Chromium; return the problems (empty if all good).

    Prints one line per page. Requests that leave the loopback server are blocked and reported
    (the book must not need the network); ``screenshots``: a folder to save full-page PNGs in.
    """
    from urllib.parse import urlparse

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return ["playwright is not installed: pip install -e '.[test]' -c constraints.txt"]
    if not Path(CHROMIUM).exists():
        return [f"{CHROMIUM} is missing: apt-get install chromium (`make test` does)"]
    root = Path(root)
    html = Path(html_dir) if html_dir else root / "_build" / "html"
    if not (html / "index.html").exists():
        return [f"{html}/index.html is missing: build the book first (jupyter-book build .)"]
    problems: list[str] = []
    with _serve(html) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": SCREEN_HEIGHT})  # a laptop screen: code must fit the column here
        external: list[str] = []

        def route(r):
            if urlparse(r.request.url).hostname in ("127.0.0.1", "localhost"):
                r.continue_()
            else:
                external.append(r.request.url)
                r.abort()

        page.route("**/*", route)
        shown_claims: dict = {}
        front_page: dict = {}
        for doc in toc_pages(root):
            rel = f"{doc}.html"
            bad = []
            external.clear()
            response = page.goto(f"{base}/{rel}", wait_until="load")
            if response is None or response.status != 200:
                problems.append(f"{rel}: HTTP {response.status if response else 'no response'}")
                print(f"FAIL {rel}  not found")
                continue
            page_bad, label, claims, summary = _page_problems(page, root, doc)
            bad.extend(page_bad)
            if external:
                bad.append(f"{len(external)} request(s) to the network blocked, e.g. {external[0]}")
            shown_claims[doc] = claims
            if summary:
                front_page = summary
            if screenshots:
                Path(screenshots).mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(Path(screenshots) / f"{doc.replace('/', '_')}.png"), full_page=True)
            if bad:
                problems.extend(f"{rel}: {b}" for b in bad)
                print(f"FAIL {rel}  {label}: " + "; ".join(bad))
            else:
                print(f"ok   {rel}  {label}")
        browser.close()
    # The front page's "What reproduces" counts must be what the chapter pages show.
    for link, counts in front_page.items():
        doc = re.sub(r"^(\.\./)+", "", link).removesuffix(".html")
        shown = shown_claims.get(doc)
        if shown is None:
            problems.append(f"front page: its results table links {link}, which is not a page of the toc")
        elif (shown["rows"], shown["not reproduced"]) != (counts["claims"], counts["not reproduced"]):
            problems.append(f"front page: {doc} counted {counts['claims']} claims, {counts['not reproduced']} not "
                            f"reproduced; its page shows {shown['rows']} and {shown['not reproduced']}: run `gradcore results`")
    return problems


#: In dark mode, the output tables whose box is not transparent (the theme's light box for HTML outputs).
_DARK_TABLES_JS = """() => {
    const root = document.documentElement, before = root.dataset.theme;
    root.dataset.theme = 'dark';
    const boxed = [...document.querySelectorAll('.cell_output table')].filter(t => {
        const box = t.closest('.output');
        return box && getComputedStyle(box).backgroundColor !== 'rgba(0, 0, 0, 0)';
    }).length;
    root.dataset.theme = before;
    return boxed;
}"""

#: Counts the claims rows of a page, those marked not reproduced, and rows that carry no verdict class.
_CLAIMS_ROWS_JS = """() => {
    const rows = [...document.querySelectorAll('table.gradcore-claims tbody tr')];
    const marked = r => ['claim-holds', 'claim-not-reproduced', 'claim-fails'].some(c => r.classList.contains(c));
    return {rows: rows.length, 'not reproduced': rows.filter(r => r.classList.contains('claim-not-reproduced')).length,
            unmarked: rows.filter(r => !marked(r)).length};
}"""

#: Shown code cells whose longest line does not fit the text column: that line, per cell.
_WIDE_CODE_JS = """() => [...document.querySelectorAll('div.cell_input pre')]
    .filter(p => p.offsetParent !== null && p.innerText.trim() && p.scrollWidth > p.clientWidth + 1)
    .map(p => p.innerText.split('\\n').reduce((a, l) => l.length > a.length ? l : a, ''))"""

#: A chapter's key-findings admonition: present, above the first code cell, with its glued findings (list items).
_FINDINGS_JS = """() => {
    const box = [...document.querySelectorAll('.admonition')].find(
        a => ((a.querySelector('.admonition-title') || {}).innerText || '').trim() === 'Key findings');
    if (!box) return {found: false, before: false, items: 0};
    const cell = document.querySelector('.cell');
    const before = !cell || !!(box.compareDocumentPosition(cell) & Node.DOCUMENT_POSITION_FOLLOWING);
    return {found: true, before, items: box.querySelectorAll('li').length};
}"""

#: The front page's results table (header Chapter | Claims | Held | Not reproduced | Failed | Fragile): link -> counts.
_RESULTS_SUMMARY_JS = """() => {
    const found = {};
    for (const table of document.querySelectorAll('table')) {
        const head = [...table.querySelectorAll('thead th')].map(th => th.innerText.trim());
        if (head.join('|') !== 'Chapter|Claims|Held|Not reproduced|Failed|Fragile') continue;
        for (const row of table.querySelectorAll('tbody tr')) {
            const cells = [...row.querySelectorAll('td')].map(td => td.innerText.trim());
            const link = row.querySelector('a');
            if (link) found[link.getAttribute('href')] = {claims: +cells[1], 'not reproduced': +cells[3]};
        }
    }
    return found;
}"""
