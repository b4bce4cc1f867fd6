"""pybtex's plugins found once per build, not once per citation.

sphinxcontrib-bibtex formats every ``{footcite}`` role (about 300 in the book) with a
new pybtex style, and each style looks up its plugins (the style, its labels, names,
sorting) with ``pybtex.plugin.find_plugin``, which asks ``importlib.metadata`` for the
entry points of the group: a scan of every installed distribution's metadata (about
160 in the course's environment), some 1,200 scans per site build. Measured here with
cProfile: 38 s of a 168 s profiled build, every citation's cost but its text.

Here the scan is memoised by its arguments (the group and the name) for the life of
the process: the installed distributions do not change during a build, and pybtex
still checks the plugins registered at run time (``register_plugin``) before it calls
the scan, so those are found as before. Enabled in ``_config.yml``
(``local_extensions``); ``tests/test_tooling.py`` checks that a second lookup does not
scan again and finds the same class.
"""

from __future__ import annotations

import functools

import pybtex.plugin


def memoise_entry_points() -> None:
    """Wrap ``pybtex.plugin.entry_points`` (the scan) in a cache, once."""
    scan = pybtex.plugin.entry_points
    if not hasattr(scan, "cache_info"):
        pybtex.plugin.entry_points = functools.cache(scan)


def setup(app):
    memoise_entry_points()
    return {"parallel_read_safe": True, "parallel_write_safe": True}
