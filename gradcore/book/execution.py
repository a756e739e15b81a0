"""Execute one chapter with papermill, in the kernel environment nbval also uses."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from pathlib import Path

from ..papers import SMOKE_VARIABLE
from .layout import (
    DEFAULT_PROFILE,
    SLOW_CELL_SECONDS,
    SMOKE_DIR,
    SMOKE_PROFILE,
    PipelineError,
    chapter_source,
    first_line,
    parameters_cell_index,
    read_source,
    resolve,
)
from .notebooks import normalise, write_notebook
from .status import record

# -------------------------------------------------------------------------------------- execution


#: glibc's allocator settings for the kernels: blocks up to 32 MiB (its largest threshold) from the
#: heap, never trimmed.
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
    # allocation; keeping freed memory in the heap makes the chapters 3-8% faster (numbers
    # unchanged).
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


def _locate(root: Path, src: Path, nb, index: int, exc) -> str:
    """``book/x.md:LINE`` of the failing cell's fence, and the failing line inside the cell."""
    ordinal = sum(c.cell_type == "code" for c in nb.cells[:index])
    fences = [
        i
        for i, line in enumerate(src.read_text().splitlines(), 1)
        if re.match(r"^`{3,}\{code-cell\}", line)
    ]
    where = (
        f"{src.relative_to(root)}:{fences[ordinal]}"
        if ordinal < len(fences)
        else str(src.relative_to(root))
    )
    lines = re.findall(
        r"Cell In\[\d+\], line (\d+)", re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(exc.traceback))
    )
    return f"{where}, line {lines[0]} of the cell" if lines else where


def execute(
    root,
    chapter: str,
    profile: str = DEFAULT_PROFILE,
    parameters: dict | None = None,
    quiet: bool = False,
    output: Path | None = None,
    environment: dict | None = None,
    smoke: bool = False,
    cell_times: list | None = None,
    kernel=None,
    record_smoke: bool = False,
) -> Path:
    """Execute one chapter; write and return its normalised notebook. Raises PipelineError.

    ``output``: write there instead of ``notebooks/`` and leave the Status page alone (a drift
    measurement, not a run of the book); ``environment``: variables the kernel runs with
    (``ATEN_CPU_CAPABILITY``, ``MKL_CBWR``, ``GRADCORE_THREADS``: another float path).
    ``smoke``: the paper profile with every budget cut (``gradcore.papers.Paper.smoke``) and the
    claims shown but not asserted, written to ``_build/smoke/CHAPTER.ipynb`` by default: it proves
    the paper's code paths run, and measures nothing. ``cell_times``: a list to append one
    ``(source cell index, first line, wall seconds)`` per executed code cell to. ``kernel``: a
    started kernel manager to run in (:func:`execute_smoke_runs`) instead of a fresh kernel.
    ``record_smoke``: store a smoke run's seconds in notebooks/status.json as profile
    ``paper-smoke``, the estimate by which ``gradcore smoke`` splits the chapters between kernels.
    """
    if record_smoke and not smoke:
        raise PipelineError(
            "record_smoke records a smoke run (--record stores a smoke run's time; it goes with "
            "--profile paper --smoke)"
        )
    if smoke:
        if profile != "paper":
            raise PipelineError(
                "--smoke cuts the paper profile's budgets; it needs --profile paper, not "
                f"{profile!r}"
            )
        environment = {**(environment or {}), SMOKE_VARIABLE: "1"}
        output = (
            output if output is not None else Path(root).resolve() / SMOKE_DIR / f"{chapter}.ipynb"
        )
    import papermill
    from papermill.exceptions import PapermillExecutionError

    root = Path(root).resolve()
    src = chapter_source(root, chapter)
    nb = read_source(src)
    _, inject = resolve(chapter, nb, profile, dict(parameters or {}))
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
            cell_times.append(
                (source_index(cell_index), first_line(cell.source), round(seconds, 2))
            )
        if seconds >= SLOW_CELL_SECONDS and not quiet:
            print(
                f"   {seconds:7.1f} s  cell {source_index(cell_index)}  "
                f"`{first_line(cell.source)}`",
                flush=True,
            )

    t0 = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="gradcore-") as tmp,
        kernel_env(profile, environment) as kernel_environment,
    ):
        log = Path(tmp) / "kernel.log"
        try:
            with _stderr_to(log):
                result = papermill.execute_notebook(
                    nb,
                    str(Path(tmp) / f"{chapter}.ipynb"),
                    parameters=inject or None,
                    cwd=str(nbdir),
                    kernel_name="python3",
                    progress_bar=False,
                    on_cell_start=on_cell_start,
                    on_cell_executed=on_cell_executed,
                    **({"km": kernel} if kernel is not None else {}),
                )
        except PapermillExecutionError as exc:
            index = exc.cell_index
            if inject and index == param_index + 1:
                where = "the injected parameters cell"
            else:
                index = source_index(index)
                location = _locate(root, src, nb, index, exc)
                where = f"cell {index} (`{first_line(exc.source)}`, {location})"
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
    elif record_smoke:
        record(root, chapter, SMOKE_PROFILE, inject, seconds, out, kernel_environment)
    return out


#: Run in a shared kernel between two chapters: every figure closed, every user variable gone.
RESET_NAMESPACE = "import matplotlib.pyplot as _pyplot\n_pyplot.close('all')\n%reset -f"


def execute_smoke_runs(root, chapters, quiet: bool = False, record: bool = False) -> list[Path]:
    """The smoke runs of several chapters, one after another in one kernel; their notebooks.

    A smoke run measures nothing, and part of a short one is the kernel's start and its imports:
    torch, gradcore, and ``torch._dynamo`` (which torch imports at the first optimiser or
    ``torch.func`` transform). One kernel pays them once: the nine busy chapters' smoke runs took
    128 s of CPU in one kernel against 150 s in nine (measured on one core, bytecode cached).
    Before each chapter but the first, every figure is closed and the namespace reset
    (``%reset -f``): a chapter sees the modules an earlier one imported, never its variables.
    After a chapter fails, a new kernel runs the next one; the
    PipelineError at the end names every chapter that failed. ``record``: store each chapter's
    seconds as its ``paper-smoke`` run in notebooks/status.json (:func:`execute`).
    """
    import nbformat
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient

    root = Path(root).resolve()
    written, failures = [], []
    with (
        tempfile.TemporaryDirectory(prefix="gradcore-") as tmp,
        kernel_env("paper", {SMOKE_VARIABLE: "1"}),
    ):

        def start() -> AsyncKernelManager:
            kernel = AsyncKernelManager(kernel_name="python3")
            with _stderr_to(Path(tmp) / "kernel.log"):  # the kernel keeps this stderr for its life
                run_sync(kernel.start_kernel)(cwd=str(root / "notebooks"))
            return kernel

        kernel, fresh = start(), True
        try:
            for chapter in chapters:
                if not fresh:
                    cell = nbformat.v4.new_code_cell(RESET_NAMESPACE)
                    reset = nbformat.v4.new_notebook(cells=[cell])
                    NotebookClient(reset, km=kernel, kernel_name="python3").execute()
                try:
                    written.append(
                        execute(
                            root,
                            chapter,
                            "paper",
                            smoke=True,
                            quiet=quiet,
                            kernel=kernel,
                            record_smoke=record,
                        )
                    )
                    fresh = False
                except PipelineError as error:  # a new kernel for the rest, whatever this one's
                    failures.append(str(error))
                    run_sync(kernel.shutdown_kernel)(now=True)
                    kernel, fresh = start(), True
        finally:
            run_sync(kernel.shutdown_kernel)(now=True)
    if failures:
        raise PipelineError(
            f"{len(failures)} of {len(chapters)} smoke runs failed:\n" + "\n".join(failures)
        )
    return written
