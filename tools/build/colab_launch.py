"""A Sphinx extension: the Colab launch button opens the Colab edition.

sphinx-book-theme builds the button as
``{colab_url}/github/{org}/{repo}/blob/{repository.branch}/{path}``: the same branch as
the rest of the site and as every notebook's install cell (``git+URL@main``), with no
setting for Colab alone. The Colab edition (tools/build/colab_edition.py) is published
on its own branch (``colab``, see tools/README.md) at the repository's own paths, so
the button only needs its branch changed. This extension does that after the theme has
made the button (``html-page-context``, later priority than the theme's 501). It also
retitles the download menu's ``.ipynb`` entry, which serves the Colab edition too
(``colab_edition.serve_downloads``).

Enable it in _config.yml once the branch is published (before, the button would open
a branch that does not exist):

    sphinx:
      local_extensions:
        colab_launch: tools/build/
      config:
        colab_branch: colab

Standalone on purpose: ``local_extensions`` imports it by file, not as ``tools.…``.
"""

from __future__ import annotations

import re

COLAB = re.compile(
    r"^(?P<head>https://colab\.research\.google\.com/github/[^/]+/[^/]+/blob/)"
    r"(?P<branch>[^/]+)(?P<tail>/.*)$"
)


def colab_button_url(url: str, branch: str) -> str:
    """``url`` (a Colab launch URL) with its branch replaced by ``branch``; any other
    URL unchanged."""
    m = COLAB.match(url)
    return f"{m['head']}{branch}{m['tail']}" if m else url


def _retarget(buttons: list, branch: str) -> int:
    changed = 0
    for button in buttons:
        if not isinstance(button, dict):
            continue
        if "url" in button and COLAB.match(button["url"]):
            button["url"] = colab_button_url(button["url"], branch)
            changed += 1
        changed += _retarget(button.get("buttons", []), branch)  # the launch menu
    return changed


DOWNLOAD_TOOLTIP = "Download this page as a notebook (its Colab edition)"


def _retitle_download(buttons: list) -> int:
    """The download menu's ``.ipynb`` entry serves the Colab edition
    (``colab_edition.serve_downloads``), not the page's source: say so."""
    changed = 0
    for button in buttons:
        if not isinstance(button, dict):
            continue
        if button.get("label") == "download-source-button" and str(
            button.get("url", "")
        ).endswith(".ipynb"):
            button["tooltip"] = DOWNLOAD_TOOLTIP
            changed += 1
        changed += _retitle_download(button.get("buttons", []))
    return changed


def retarget_colab_button(app, pagename, templatename, context, doctree) -> None:
    branch = app.config.colab_branch
    if branch:
        _retarget(context.get("header_buttons", []), branch)
    _retitle_download(context.get("header_buttons", []))


def setup(app):
    app.add_config_value("colab_branch", "", "html")
    app.connect("html-page-context", retarget_colab_button, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
