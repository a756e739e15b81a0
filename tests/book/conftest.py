"""A temporary repository holding the tiny chapter (tests/book/tiny.py)."""

from __future__ import annotations

import pytest

from .tiny import TINY


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "book" / "intro.md").write_text("# Intro\n\nNot a chapter: no jupytext header.\n")
    (tmp_path / "book" / "tiny.md").write_text(TINY)
    return tmp_path

