"""Tests of gradcore.book.notebooks: normalisation: a rerun on the same float path changes no byte."""

from __future__ import annotations

import copy
import json
import re

import nbformat

from gradcore.book import notebooks

from .tiny import REPO


def test_normalise_collapses_progress_and_merges_streams():
    def stream(name, text):
        return nbformat.v4.new_output("stream", name=name, text=text)

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x", execution_count=1)
    cell.outputs = [
        stream("stderr", "\r  0%|  | 0/2"), stream("stdout", "a\n"), stream("stderr", "\r 50%|# | 1/2"),
        stream("stderr", "\r100%|##| 2/2"), stream("stdout", "b\n"), stream("stderr", "\n"),
        nbformat.v4.new_output("display_data", data={"text/plain": "fig"}),
        stream("stdout", "c\r\n"),
    ]
    cell.metadata["execution"] = {"iopub.status.busy": "2025-01-01T00:00:00"}
    cell.metadata["papermill"] = {"duration": 1.0}
    nb.cells = [cell]
    nb.metadata["papermill"] = {"start_time": "t", "end_time": "t", "duration": 1.0, "parameters": {},
                                "environment_variables": {}, "input_path": "in", "output_path": "/tmp/x"}
    out = notebooks.normalise(nb)
    outs = out.cells[0].outputs
    assert [(o.output_type, o.get("name"), o.get("text")) for o in outs] == [
        ("stream", "stderr", "100%|##| 2/2\n"), ("stream", "stdout", "a\nb\n"),
        ("display_data", None, None), ("stream", "stdout", "\n"),
    ]
    assert out.cells[0].metadata == {}
    assert out.metadata["papermill"] == {"parameters": {}}
    assert re.fullmatch(r"[0-9a-f]{10}", out.cells[0].id)


def test_normalised_streams_compare_equal_under_nbval():
    """What nbval does to stored and live outputs (merge every stream of a name, drop overwritten
    frames, then our sanitizer) gives the same text for the raw and the normalised outputs."""
    from nbval.plugin import coalesce_streams, get_sanitize_patterns

    patterns = get_sanitize_patterns((REPO / "tests" / "nbval_sanitize.cfg").read_text())

    def nbval_view(outputs):
        # nbval compares, per output key (a stream's name, a MIME type), the list of values
        views: dict = {}
        for o in coalesce_streams(copy.deepcopy(outputs)):
            text = o.get("text", "") if o.output_type == "stream" else json.dumps(o.get("data"))
            for regex, replace in patterns:
                text = re.sub(regex, replace, text)
            views.setdefault(o.get("name", o.output_type), []).append(text)
        return views

    def stream(name, text):
        return nbformat.v4.new_output("stream", name=name, text=text)

    cases = [
        [stream("stderr", f"\r{i}/3 [00:0{i}<00:00, {i}.5it/s]") for i in range(4)] + [stream("stderr", "\n")],
        [stream("stdout", "partial"), nbformat.v4.new_output("display_data", data={"text/plain": "x"}),
         stream("stdout", "\roverwritten\n")],
        [stream("stderr", "\r 10%\r" + " " * 10 + "\r"), stream("stdout", "after\n")],  # tqdm leave=False
        [stream("stdout", "windows\r\n"), stream("stderr", "w\n"), stream("stdout", "x\ry\n")],
    ]
    for raw in cases:
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell("x", execution_count=1)]
        nb.cells[0].outputs = copy.deepcopy(raw)
        stored = notebooks.normalise(nb).cells[0].outputs
        assert not any("\r" in o.get("text", "").lstrip("\r") for o in stored)
        assert nbval_view(stored) == nbval_view(raw)


def test_sanitize_file_is_read_whole():
    """Every `regex:` line has its `replace:` line (a stripped trailing space would drop a pair)."""
    from nbval.plugin import get_sanitize_patterns

    text = (REPO / "tests" / "nbval_sanitize.cfg").read_text()
    pairs = get_sanitize_patterns(text)
    assert len(pairs) == len(re.findall(r"^regex: ", text, re.M)) == 7
    sanitize = dict(pairs)

    def apply(s):
        for regex, replace in sanitize.items():
            s = re.sub(regex, replace, s)
        return s

    assert apply("100%|##| 20/20 [00:01<00:00, 35.21it/s]") == apply("100%|##| 20/20 [00:03<00:00, 7.10it/s]")
    assert apply("x [1:02:03<?, ?it/s, loss=0.1]") == "x [TQDM-TIME, loss=0.1]"
    assert apply("wall 12.05 s\n") == apply("wall 3.10 s\n") != apply("wall 3.10 ms\n")
    assert apply("peak memory 3.8 GiB") == apply("peak memory 12 GiB") != apply("peak memory 3.8 MiB")
    assert apply("<a.B object at 0x7f3a2c1d0e50>") == "<a.B object at 0xADDRESS>"
    assert apply("loss 0.123456\n") == "loss 0.123456\n"
    # The case CI met: the same finished bar, one cell wider because the rate was printed shorter.
    assert (apply("federated (none): 100%|██████████| 150/150 [00:07<00:00, 20.1it/s]")
            == apply("federated (none): 100%|███████████| 150/150 [00:15<00:00, 9.8it/s]"))
    assert apply("| a | | b |") == "| a | | b |"  # table cells are not bars
    # The case another float path met: L-BFGS stopping early at another step; the total stays compared.
    assert (apply("dlg (lbfgs):  94%|█████████▍| 187/200 [00:07<00:00, 20.1it/s]")
            == apply("dlg (lbfgs):  90%|█████████ | 180/200 [00:07<00:00, 20.1it/s]")
            != apply("dlg (lbfgs):  90%|█████████ | 180/300 [00:07<00:00, 20.1it/s]"))

