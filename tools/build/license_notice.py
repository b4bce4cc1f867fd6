"""The course's licenses, said once for every place that says them.

The code (the library ``posenc_lib``, the tools, the tests and the notebooks' code
cells) is under the MIT License (``LICENSE``); the text (the book's pages and the
notebooks' prose, figures, exercises and solutions, the teaching guide, the slides and
the editions made from them) under Creative Commons Attribution-ShareAlike 4.0
(``LICENSE-CONTENT``), as open textbooks such as Dive into Deep Learning do. The
README of every edition (Colab, student, instructor, the session zips, the slides)
ends with ``notice()``; the site says it in the footer of every page (``_config.yml``,
``html.extra_footer``); ``CITATION.cff`` and ``pyproject.toml`` name both.
``tests/test_licenses.py`` checks that each of them does.
"""

from __future__ import annotations

from tools.authoring.colab_cell import _config_value

CODE = "MIT"  # SPDX identifiers
CONTENT = "CC-BY-SA-4.0"
CONTENT_NAME = "Creative Commons Attribution-ShareAlike 4.0 (CC BY-SA 4.0)"
CONTENT_URL = "https://creativecommons.org/licenses/by-sa/4.0/"
TITLE = "Positional Encoding: Past, Present and Future"


def site_url() -> str:
    from tools.build.colab_edition import site_url as url

    return url()


def notice() -> str:
    """A README's closing section: both licenses, with links, and how to credit."""
    repo, branch = _config_value("url"), _config_value("branch")
    return f"""
## License

The text, figures, exercises, solutions and slides of the course are under the
{CONTENT_NAME} license ({CONTENT_URL}): you may copy and adapt them, for a course of
your own too, if you credit "{TITLE}" ({site_url()}) and share your changes under
the same license. The code (the library `posenc_lib` and the notebooks' code cells)
is under the MIT License. Both texts: {repo}/blob/{branch}/LICENSE-CONTENT and
{repo}/blob/{branch}/LICENSE. Found a mistake? {repo}/issues
"""
