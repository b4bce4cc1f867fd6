"""The course says under which licenses it may be reused, everywhere a reader, a
teacher or a library user meets it, and how to cite it and report a problem.

- ``LICENSE`` (MIT: the code) and ``LICENSE-CONTENT`` (CC BY-SA 4.0: the text,
  figures, exercises, slides and editions) hold the standard texts; the library's
  wheel ships ``LICENSE``;
- ``pyproject.toml`` names the license and the project's URLs, ``CITATION.cff`` how
  to cite the course, both from ``_config.yml``'s repository URL;
- the site says both licenses in the footer of every page and has the issues button
  (the built pages: ``tests/test_site_files.py``); every edition's README (Colab,
  student, session zips, instructor, slides) ends with both licenses.
"""

from __future__ import annotations

import pathlib
import zipfile

import yaml

from tools.authoring.colab_cell import _config_value
from tools.build import colab_edition, license_notice, session_bundles, slides
from tools.build import student_edition

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
REPO = _config_value("url")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_license_files_hold_the_standard_texts():
    mit = (ROOT / "LICENSE").read_text()
    assert mit.startswith("MIT License\n\nCopyright (c) 2026 The posenc course team\n")
    assert "Permission is hereby granted, free of charge" in mit and "<" not in mit
    content = (ROOT / "LICENSE-CONTENT").read_text()
    for part in (
        "Creative Commons Attribution-ShareAlike 4.0 International Public License",
        "Section 1 – Definitions.",
        "Section 3 – License Conditions.",
        "Section 8 – Interpretation.",
        "Creative Commons may be contacted at creativecommons.org.",
    ):
        assert part in content, part
    assert license_notice.CONTENT_URL in content


def test_pyproject_names_the_license_and_the_projects_urls():
    assert PROJECT["license"] == license_notice.CODE
    assert PROJECT["license-files"] == ["LICENSE"]
    assert PROJECT["urls"] == {
        "Repository": REPO,
        "Documentation": colab_edition.site_url(),
        "Issues": f"{REPO}/issues",
    }


def test_the_citation_file_matches_the_project():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["message"]
    assert cff["title"] == config["title"] == license_notice.TITLE
    assert cff["authors"] == [{"name": config["author"]}]
    assert cff["version"] == PROJECT["version"]
    assert cff["license"] == [license_notice.CODE, license_notice.CONTENT]
    assert cff["repository-code"] == REPO
    assert cff["url"] == colab_edition.site_url()


def test_the_site_says_the_licenses_and_has_the_issues_button():
    html = yaml.safe_load((ROOT / "_config.yml").read_text())["html"]
    assert html["use_issues_button"] is True
    footer = html["extra_footer"]
    assert license_notice.CONTENT_URL in footer and "MIT" in footer
    for name in ("LICENSE", "LICENSE-CONTENT"):
        assert f'href="{REPO}/blob/{_config_value("branch")}/{name}"' in footer
    assert f'href="{REPO}/issues"' in footer


def readmes(tmp_path) -> dict[str, str]:
    colab = colab_edition.write_readme(tmp_path).read_text()
    key = colab_edition.instructor_zip(tmp_path, [])
    with zipfile.ZipFile(key) as archive:
        instructor = archive.read("README.md").decode()
    first_session = slides.sessions()[0]
    return {
        "Colab edition": colab,
        "student edition": student_edition.readme(),
        "a session's zip": session_bundles.readme(first_session),
        "instructor edition": instructor,
        "slides": slides.readme(),
    }


def test_every_editions_readme_says_both_licenses(tmp_path):
    for edition, text in readmes(tmp_path).items():
        assert "## License" in text, edition
        assert license_notice.CONTENT_URL in text, edition
        assert "MIT License" in text, edition
        assert f"{REPO}/blob/main/LICENSE-CONTENT" in text, edition
        assert colab_edition.site_url() in text, edition  # whom to credit


def test_the_librarys_wheel_ships_the_license(library_wheel):
    wheel = library_wheel  # built by pip from the tracked files (tests/conftest.py)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        meta = archive.read(next(n for n in names if n.endswith("/METADATA")))
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert b"License-Expression: MIT" in meta
    assert f"Project-URL: Issues, {REPO}/issues".encode() in meta
