"""Part I's lens as data: how each registered encoding treats the four terms of
(U+P) attention."""

from __future__ import annotations

from ..base import FOUR_TERMS, HOOKS
from ..registry import REGISTRY

__all__ = ["four_term_table"]


def four_term_table() -> list[dict[str, str]]:
    """One row per registered encoding: its name, hook(s) overridden, and its
    ``four_terms``."""
    from ..base import overrides

    rows = []
    for name, factory in REGISTRY.items():
        pe = factory(d_model=64, n_heads=4, max_len=16)  # d_head 16 fits every method
        cls = type(pe)
        hooks = [h for h in HOOKS if overrides(pe, h)]
        rows.append(
            {
                "encoding": name,
                "hooks": ", ".join(hooks) or "(none)",
                **{term: cls.four_terms[term] for term in FOUR_TERMS},
            }
        )
    return rows
