"""Tests of gradcore.book.execution: one chapter executed with papermill, and what a failure says."""

from __future__ import annotations

import json

import nbformat
import pytest

from gradcore.book import execution, freshness, layout

from .tiny import FAILING, HEADER, write_fake_executed


@pytest.mark.kernel
def test_execute_writes_a_normalised_reproducible_notebook(repo):
    path = execution.execute(repo, "tiny")
    assert path == repo / "notebooks" / "tiny.ipynb"
    first = path.read_bytes()
    assert first.endswith(b"}\n")
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert set(nb.metadata) == {"gradcore", "kernelspec", "language_info", "papermill"}
    assert nb.metadata["papermill"] == {"parameters": {}}
    assert not any(c.metadata.get(k) for c in nb.cells for k in ("execution", "papermill"))
    assert not any("injected-parameters" in c.metadata.get("tags", []) for c in nb.cells)
    code = [c for c in nb.cells if c.cell_type == "code"]
    outs = code[1].outputs
    assert [(o.output_type, o.name) for o in outs] == [("stream", "stderr"), ("stream", "stdout")]
    assert outs[0].text == "100%|██████████| 15/15\n"  # the final frame only
    assert outs[1].text == "result 1.5 False x ci\n"
    assert code[2].outputs[0].data["text/plain"] == "4"
    # the figure survives the MPLBACKEND=Agg that tests/conftest.py exports
    assert [o.output_type for o in code[3].outputs] == ["display_data"] and "image/png" in code[3].outputs[0].data
    # code identical to the source, so the notebook is fresh
    assert freshness.freshness(repo) == []
    status = json.loads((repo / "notebooks" / "status.json").read_text())
    run = status["tiny"]["ci"]
    assert run["profile"] == "ci" and run["device"] and run["python"] and run["seconds"] > 0
    # where the committed numbers came from: they reproduce bit for bit only on this float path
    assert run["cpu"] and run["capability"] and run["blas"] and run["float_path"]
    assert "OMP_NUM_THREADS=" in run["float_path"]  # the kernel's thread count, not this process's environment
    page = (repo / "notebooks" / "status.md").read_text()
    assert page.startswith("# Status\n") and "| tiny | ci | default |" in page
    # The machine is a key in the table, spelled out once under it.
    assert "| M1 |" in page and f"- **M1**: {run['device']}; {run['cpu']}" in page

    execution.execute(repo, "tiny")
    assert path.read_bytes() == first  # byte-identical re-run


@pytest.mark.kernel
def test_paper_run_with_parameters_leaves_the_ci_notebook_alone(repo):
    ci = write_fake_executed(repo)
    before = ci.read_bytes()
    out = execution.execute(repo, "tiny", profile="paper", parameters={"n": "2", "flag": "yes"})
    assert out == repo / "notebooks" / "paper" / "tiny.ipynb"
    assert ci.read_bytes() == before
    nb = nbformat.read(out, as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and "n = 2" in injected[0].source and "flag = True" in injected[0].source
    assert nb.metadata["papermill"]["parameters"] == {"n": 2, "flag": True, "profile": "paper"}
    assert "result 1.0 True x paper\n" in [o.get("text") for c in nb.cells for o in c.get("outputs", [])]
    status = json.loads((repo / "notebooks" / "status.json").read_text())
    assert status["tiny"]["paper"]["parameters"] == {"n": 2, "flag": True}


@pytest.mark.kernel
def test_failing_chapter_names_the_cell_and_leaves_the_notebook(repo):
    (repo / "book" / "bad.md").write_text(FAILING)
    committed = repo / "notebooks" / "bad.ipynb"
    committed.write_text("{}\n")
    with pytest.raises(layout.PipelineError) as err:
        execution.execute(repo, "bad")
    msg = str(err.value)
    line = FAILING.splitlines().index("y = x + 1  # fine")  # the fence is the line before it (1-based)
    assert f"cell 3 (`y = x + 1  # fine`, book/bad.md:{line}, line 2 of the cell)" in msg
    assert "ValueError: boom" in msg and "left untouched" in msg
    assert committed.read_text() == "{}\n"
    assert not (repo / "notebooks" / "status.json").exists()


BUGGY_ATTACK = HEADER + """
# A chapter whose attack has a bug

```{code-cell} ipython3
:tags: [parameters]
profile = "ci"
```

```{code-cell} ipython3
import numpy as np
from gradcore import ATTACKS, data, evaluation, experiments

@ATTACKS.register("buggy")
def buggy(observation, iterations: int = 1):
    return np.zeros(3) + np.zeros(4)  # a broadcasting bug: a plain ValueError, not a refusal

digits = data.load("digits", limit=50)
cases = {"digits": [experiments.scenario(digits, "mlp", 1, seed=0, widths=(16,))]}
grid = evaluation.matrix({"bug": {"attack": "buggy"}}, {"noise": {"defense": "noise", "sigma": 0.1}},
                         cases, metrics=("mse",), progress=False)
```
"""


@pytest.mark.kernel
def test_a_bug_inside_an_attack_fails_the_chapter_instead_of_scoring_a_defense_win(repo):
    (repo / "book" / "buggy.md").write_text(BUGGY_ATTACK)
    with pytest.raises(layout.PipelineError, match="ValueError: operands could not be broadcast"):
        execution.execute(repo, "buggy")



PROBE = HEADER + """
# A chapter that looks for what an earlier one left

```{code-cell} ipython3
:tags: [parameters]
profile = "ci"
```

```{code-cell} ipython3
import os
import matplotlib.pyplot as plt
assert "scale" not in dir() and "label" not in dir(), "a variable of the chapter before"
assert plt.get_fignums() == [], "a figure of the chapter before"
print("probe", profile, os.environ["GRADCORE_PROFILE"])
```
"""


@pytest.mark.kernel
def test_smoke_runs_share_one_kernel_and_none_sees_anothers_variables(repo):
    (repo / "book" / "probe.md").write_text(PROBE)
    written = execution.execute_smoke_runs(repo, ["tiny", "probe"])
    assert written == [repo / "_build" / "smoke" / "tiny.ipynb", repo / "_build" / "smoke" / "probe.ipynb"]
    probe = nbformat.read(written[1], as_version=4)
    assert [o.text for o in probe.cells[-1].outputs] == ["probe paper paper\n"]
    # Unrecorded: the Status page and the split's estimates stay as they were.
    status = repo / "notebooks" / "status.json"
    assert not status.exists() or "paper-smoke" not in status.read_text()


@pytest.mark.kernel
def test_a_recorded_smoke_run_stores_its_seconds_as_the_paper_smoke_profile(repo):
    execution.execute_smoke_runs(repo, ["tiny"], record=True)
    run = json.loads((repo / "notebooks" / "status.json").read_text())["tiny"]["paper-smoke"]
    assert run["profile"] == "paper-smoke" and run["notebook"] == "_build/smoke/tiny.ipynb"
    assert 0 < run["seconds"] < 120
    page = (repo / "notebooks" / "status.md").read_text()
    # In a section of its own, apart from the runs whose numbers the book shows.
    smoke_section = page.index("## Smoke runs")
    row = f"| tiny | {run['seconds']:.0f}\u00a0s | {run['date'][:-4].replace(' ', chr(160))} |"
    assert page.index(row) > smoke_section
    assert "paper-smoke |" not in page[:smoke_section]
    assert not (repo / "notebooks" / "tiny.ipynb").exists()  # the ci notebook is left alone


def test_only_a_smoke_run_is_recorded_as_one(repo):
    with pytest.raises(layout.PipelineError, match="record_smoke records a smoke run"):
        execution.execute(repo, "tiny", record_smoke=True)


@pytest.mark.kernel
def test_a_failing_smoke_run_is_named_and_the_next_still_runs(repo):
    (repo / "book" / "failing.md").write_text(FAILING)
    with pytest.raises(layout.PipelineError, match="1 of 2 smoke runs failed") as caught:
        execution.execute_smoke_runs(repo, ["failing", "tiny"])
    assert "failing [paper] failed in cell 3 (`y = x + 1" in str(caught.value) and "boom" in str(caught.value)
    assert (repo / "_build" / "smoke" / "tiny.ipynb").exists()
    assert not (repo / "_build" / "smoke" / "failing.ipynb").exists()
