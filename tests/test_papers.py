"""gradcore.papers: every paper's settings as data, checked when a paper is defined and against its chapter.

Outside reference: the chapters themselves (book/*.md), read as text: every setting a chapter
reads must exist, and every setting a paper defines must be read somewhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gradcore import papers

BOOK = Path(__file__).resolve().parents[1] / "book"


def test_every_paper_has_every_profile():
    assert "dlg" in papers.PAPERS and papers.PAPERS["dlg"] is papers.DLG
    for name in papers.PAPERS.names():
        paper = papers.PAPERS[name]
        assert paper.key == name and paper.citation
        assert set(paper.profiles) == set(papers.PROFILES)
        for profile in papers.PROFILES:
            settings = paper.settings(profile)
            for key, value in paper.profiles[profile].items():
                assert getattr(settings, key) == value  # the profile wins over the common settings
            for key in paper.common:
                assert hasattr(settings, key)



def test_every_data_setting_names_a_data_set_gradcore_loads():
    """A setting ending in ``_data`` names a data set (a typo would only fail in the profile that
    reads it, often the paper profile that CI runs with its budgets cut)."""
    from gradcore import data

    named = 0
    for name in papers.PAPERS.names():
        for profile in papers.PROFILES:
            settings = vars(papers.PAPERS[name].settings(profile))
            for key, value in settings.items():
                if not key.endswith("_data"):
                    continue
                values = value.values() if isinstance(value, dict) else [value]
                known = data.VALIDATION_SOURCES if key == "trained_data" else data.DATASETS
                for each in values:
                    assert each in known, f"{name} [{profile}] {key} = {each!r}"
                    named += 1
    assert named >= 10


def test_unknown_profile_raises():
    with pytest.raises(ValueError, match="unknown profile 'fast' for dlg; known: ci, paper"):
        papers.DLG.settings("fast")



def test_papers_are_immutable():
    with pytest.raises(AttributeError):
        papers.DLG.key = "other"  # frozen dataclass
    settings = papers.DLG.settings("ci")
    with pytest.raises(AttributeError, match="read-only"):
        settings.lenet_images = 8



def test_a_mistyped_setting_names_its_neighbours():
    with pytest.raises(AttributeError, match="inverting_gradients \\[ci\\] has no setting 'cosine_iteration'; did you mean "
                                             "cosine_iterations"):
        papers.IG.settings("ci").cosine_iteration



def test_a_profile_missing_a_key_fails_when_the_paper_is_defined():
    with pytest.raises(ValueError, match="profile 'paper' lacks images"):
        papers.Paper("toy", "cite", {}, {"ci": {"images": 1}, "paper": {}})
    with pytest.raises(ValueError, match="images set both in common and per profile"):
        papers.Paper("toy", "cite", {"images": 2}, {"ci": {"images": 1}, "paper": {"images": 3}})



@pytest.mark.parametrize("profile", papers.PROFILES)
def test_local_step_labels_are_consistent(profile):
    """The IG chapter looks local-steps runs up by role and by their paper equivalent."""
    settings = papers.IG.settings(profile)
    assert set(settings.local_roles.values()) <= set(settings.local_settings)
    assert set(settings.local_settings) <= set(settings.paper_equivalent)



def chapter_reads(paper_pattern: str, key_pattern: str, what: str) -> dict:
    """``{chapter: (paper, keys it reads)}`` for every chapter naming one paper by ``paper_pattern``."""
    found = {}
    for path in sorted(BOOK.glob("*.md")):
        text = path.read_text()
        used = set(re.findall(paper_pattern, text))
        if used:
            assert len(used) == 1, f"{path.name} reads the {what} of several papers: {used}"
            found[path.name] = (getattr(papers, used.pop()), set(re.findall(key_pattern, text)))
    return found


def chapter_settings() -> dict:
    """``{chapter: (paper, names the chapter reads as settings.NAME)}`` for every chapter with settings."""
    return chapter_reads(r"papers\.([A-Z_]+)\.settings\(", r"\bsettings\.([a-z_0-9]+)", "settings")


def library_settings() -> dict:
    """``{module: (paper, names it reads)}`` for the experiments that read a chapter's settings (``PAPER = ...``)."""
    found = {}
    for path in sorted((BOOK.parent / "gradcore" / "experiments").glob("*.py")):
        text = path.read_text()
        paper = re.search(r"^PAPER = papers\.([A-Z_]+)$", text, re.M)
        if paper:
            found[path.name] = (getattr(papers, paper.group(1)), set(re.findall(r"\bsettings\.([a-z_0-9]+)", text)))
    return found


def keys(paper: papers.Paper) -> set:
    return set(paper.common).union(*map(set, paper.profiles.values()))


def test_every_setting_a_chapter_reads_is_defined():
    for chapter, (paper, read) in {**chapter_settings(), **library_settings()}.items():
        assert read - keys(paper) == set(), f"{chapter} reads settings {paper.key} does not define"


def test_every_defined_setting_is_read():
    """A setting no chapter reads is a typo or a leftover; a shared one is read through another paper."""
    read: dict = {}
    for paper, names in [*chapter_settings().values(), *library_settings().values()]:  # and several pages
        read[paper.key] = read.get(paper.key, set()) | names
    source = Path(papers.__file__).read_text()
    for name in papers.PAPERS.names():
        paper = papers.PAPERS[name]
        unread = {key for key in keys(paper) - read.get(name, set())
                  if not re.search(rf'\.common\["{key}"\]', source)}
        assert unread == set(), f"{name} defines settings no chapter reads: {sorted(unread)}"


def test_the_chapter_scan_sees_every_chapter_with_settings():
    from gradcore.book import layout

    assert set(chapter_settings()) == {f"{name}.md" for name in layout.chapters(BOOK.parent)}


def chapter_reported() -> dict:
    """``{chapter: (paper, keys it reads as reported["KEY"])}`` for every chapter that reads a paper's reported values."""
    return chapter_reads(r"reported = papers\.([A-Z_]+)\.reported", r"""reported\[["']([a-z_0-9A-Z]+)["']\]""",
                         "reported values")


def test_every_reported_value_a_chapter_reads_is_defined():
    for chapter, (paper, read) in chapter_reported().items():
        assert read - set(paper.reported) == set(), f"{chapter} reads reported values {paper.key} does not define"


def test_every_reported_value_is_read():
    """A paper's number that no chapter compares against is either a typo or a value typed into a chapter instead."""
    texts = [path.read_text() for path in [*BOOK.glob("*.md"), *(BOOK.parent / "gradcore").rglob("*.py")]
             if path.name != "papers.py"]
    for name in papers.PAPERS.names():
        paper = papers.PAPERS[name]
        unread = {key for key in paper.reported
                  if not any(re.search(rf"""reported\w*\[["']{key}["']\]""", text) for text in texts)}
        assert unread == set(), f"{name} reports values no chapter reads: {sorted(unread)}"
