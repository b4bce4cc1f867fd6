"""The student notebooks bundled per session (tools/build/session_bundles.py): one zip
per session of the teaching guide, with exactly that session's student notebooks, in
the student edition's layout, and a README naming them in reading order."""

from __future__ import annotations

import json
import zipfile

import pytest

from tests.browser import HTML, _unavailable
from tools.build import session_bundles, slides

SESSIONS = slides.sessions()


@pytest.fixture
def student_dir(tmp_path):
    """A stand-in for the student edition's folder: one small notebook per chapter
    at the path the student edition writes it."""
    for session in SESSIONS:
        for entry in session.chapters:
            path = tmp_path / session_bundles.notebook_path(entry)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"cells": [], "entry": entry}))
    return tmp_path


def test_each_session_has_a_zip_of_its_notebooks(student_dir):
    written = session_bundles.build(student_dir)
    assert [p.name for p in written] == [
        session_bundles.zip_name(s.number) for s in SESSIONS
    ]
    bundled = []
    for session, path in zip(SESSIONS, written):
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            readme = archive.read("README.md").decode()
            copies = {n: json.loads(archive.read(n)) for n in names if n != "README.md"}
        expected = [session_bundles.notebook_path(e) for e in session.chapters]
        assert names == ["README.md", *expected], path.name
        for name, nb in copies.items():  # the student edition's file, unchanged
            assert nb == json.loads((student_dir / name).read_text()), name
        bundled += session.chapters
        assert readme.startswith(f"# Session {session.number}: {session.title}\n")
        places = [readme.index(f"`{name}`") for name in expected]
        assert places == sorted(places), "the README lists them out of order"
        assert f"about {slides.reading_minutes(session)} minutes" in readme
        for entry, start in session.plan.optional if session.plan else []:
            line = next(
                x
                for x in readme.splitlines()
                if entry.split("/")[-1] in x and not x.startswith("#")  # not a title
            )
            assert "optional" in line, line
        assert "## In Colab" in readme  # the student edition's instructions
    assert sorted(bundled) == sorted(e for _, e in slides.toc.numbered_chapters())


def test_without_the_student_edition_it_is_written_first(tmp_path, monkeypatch):
    made = []

    def build(out_dir):
        made.append(out_dir)
        for session in SESSIONS:
            for entry in session.chapters:
                path = out_dir / session_bundles.notebook_path(entry)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("{}")

    monkeypatch.setattr(session_bundles.student_edition, "build", build)
    session_bundles.build(tmp_path)
    assert made == [tmp_path]
    assert (tmp_path / session_bundles.zip_name(1)).exists()


@pytest.mark.browser
def test_the_site_serves_every_session_zip():
    """After the site build: the zips are served beside the zip of all notebooks,
    each holding its session's notebooks as the student edition wrote them."""
    folder = HTML / "student"
    if not (folder / session_bundles.zip_name(SESSIONS[-1].number)).exists():
        _unavailable(f"no session zips in {folder}; run `make site` first")
    for session in SESSIONS:
        with zipfile.ZipFile(folder / session_bundles.zip_name(session.number)) as z:
            for entry in session.chapters:
                name = session_bundles.notebook_path(entry)
                assert z.read(name) == (folder / name).read_bytes(), name
