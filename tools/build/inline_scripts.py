"""Each inline script once per page: Sphinx 8.2's fix (sphinx-doc/sphinx#13402)
for the Sphinx 7.4 that jupyter-book 1.x requires.

``Sphinx.add_js_file(None, body=...)`` called after the HTML builder's ``init()``
hands the builder the script under the file name ``None``; ``prepare_writing()`` then
adds every registered script again under ``''``, which Sphinx's duplicate check takes
for another script, so the page gets it twice. sphinx-thebe (loaded by jupyter-book
on every page) adds ``const THEBE_JS_URL = ...`` that way at ``env-before-read-docs``
(sphinx-togglebutton its selector at ``builder-inited``), and the second ``const`` is
a SyntaxError on every page: "Identifier 'THEBE_JS_URL' has already been declared".
Here an inline script is registered under ``''`` from the start, as Sphinx 8.2 does.
Enabled in ``_config.yml`` (``local_extensions``); ``tests/test_site.py``
checks that no page logs an error.
"""

from __future__ import annotations

import sphinx


def setup(app):
    if sphinx.version_info < (8, 2):
        add_js_file = app.add_js_file  # the bound method of Sphinx

        def add_inline_once(filename, *args, **kwargs):
            return add_js_file(filename or "", *args, **kwargs)

        app.add_js_file = add_inline_once
    return {"parallel_read_safe": True, "parallel_write_safe": True}
