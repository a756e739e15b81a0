"""The book's chapters: where their sources are, their parameters and profiles, the table of
contents.

Layout (relative to a repository root):

* ``book/<name>.md``: a chapter, a MyST-markdown notebook with a jupytext header, one code cell
  tagged ``parameters`` that sets ``profile = "ci"``.
* ``notebooks/<name>.ipynb``: the chapter executed in the ci profile with default parameters (what
  is committed, checked by nbval and published).
* ``notebooks/<profile>/<name>.ipynb``: any other run (paper profile, changed parameters).
* ``notebooks/status.json`` / ``notebooks/status.md``: the last run of each chapter and profile.

Every function of :mod:`gradcore.book` takes the repository root, so the tests can work on a copy
in a temporary folder.
"""

from __future__ import annotations

import ast
import contextlib
import re
from pathlib import Path

from ..papers import PROFILES

DEFAULT_PROFILE = "ci"
#: Smoke runs are written here, never over a notebook under notebooks/.
SMOKE_DIR = Path("_build") / "smoke"
#: The profile a recorded smoke run is stored under in notebooks/status.json (``gradcore smoke
#: --record``): its seconds are the estimates by which smoke runs are split between kernels.
SMOKE_PROFILE = "paper-smoke"
INJECTED_TAG = "injected-parameters"
SLOW_CELL_SECONDS = 5.0  # `gradcore run` prints the cells that take longer, with their time


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
    """The share of a core the chapter keeps busy as it runs (front matter ``gradcore: cores:``, 1
    if unset)."""
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


def first_line(source: str) -> str:
    for line in source.splitlines():
        if line.strip():
            return line.strip()
    return "(empty cell)"


def tags(cell) -> list:
    return list(cell.get("metadata", {}).get("tags", []))


def parameters_cell_index(nb, name: str = "chapter") -> int:
    found = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "parameters" in tags(c)]
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
    """Convert a command-line string to the type of the parameter's default (bool, int, float,
    str)."""
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
        raise PipelineError(
            f"parameter {name}: {value!r} is not a valid {kind} (default {default!r})"
        ) from None


def resolve(name: str, nb, profile: str, given: dict) -> tuple[dict, dict]:
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
