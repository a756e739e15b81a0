"""Committed notebooks: normalised so that a rerun on the same float path changes no byte, and kept
fresh (their code is their chapter's source, their declared tolerances the chapter's)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .layout import DEFAULT_PROFILE

# ---------------------------------------------------------------------------------- normalisation
# Cell metadata keys written by nbclient/papermill that change on every run.
_VOLATILE_CELL_METADATA = ("execution", "papermill", "ExecuteTime")


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
            cell.outputs = [
                nbformat.from_dict(o) for o in _normalise_outputs(cell.get("outputs", []))
            ]
        cell.id = _cell_id(cell, seen)
    return nb


def write_notebook(nb, path: Path) -> None:
    import nbformat

    text = nbformat.writes(nb)
    if not text.endswith("\n"):
        text += "\n"
    write_text_atomically(path, text)


def write_text_atomically(path: Path, text: str) -> None:
    """Write through a hidden temporary file renamed when complete, so an interrupted run never
    leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
