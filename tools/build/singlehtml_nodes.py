"""A Sphinx extension for the PDF build (tools/build/pdf.py): the ``singlehtml``
builder renders every node that the ``html`` builder renders.

Sphinx looks up a node's HTML visitors under the builder's *name* and falls back to its
*format* ("html") only when no extension registered anything under that name.
sphinx-exercise 1.2 registers its nodes under ``singlehtml`` too, so the fallback never
happens and sphinx-proof's theorem, proof, ... nodes (registered under ``html`` only)
crash the single-page build ("departing unknown node type: theorem_node"; the same
class of bug as executablebooks/sphinx-proof#65). We copy every ``html`` handler that
``singlehtml`` lacks; handlers registered for ``singlehtml`` itself are kept.
"""

from __future__ import annotations


def _copy_html_handlers(app) -> None:
    handlers = app.registry.translation_handlers
    single = handlers.setdefault("singlehtml", {})
    for node, visitors in handlers.get("html", {}).items():
        single.setdefault(node, visitors)


def setup(app):
    app.connect("builder-inited", _copy_html_handlers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
