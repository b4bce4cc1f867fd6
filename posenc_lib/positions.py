"""Where the tokens are: positions checked and normalised once per forward pass.

A model (or a direct ``attention`` call) turns what the caller gave (``q_pos``,
``k_pos``, ``causal``, a mask, side inputs) into one :class:`Positions`, and every
layer reads that object. So the checks run once, at the boundary, and what depends
only on positions is computed once and shared by the layers (``Positions.reuse``, as
Hugging Face computes ``rotary_emb(hidden_states, position_ids)`` once per forward).

Host synchronisations: default positions need none (their run and offset range are
known from the shapes); explicit positions need exactly one (``.tolist()`` of every
data-dependent check at once). Under ``torch.compile`` the data checks are skipped,
so a compiled model with default positions is one graph.
"""

from __future__ import annotations

from typing import Callable, Hashable, Mapping

import torch

from .utils import (
    as_device,
    check_bool_mask,
    check_integer,
    check_nonnegative_int,
    compiling,
)

__all__ = [
    "as_positions",
    "prepare",
    "prepare_step",
    "Positions",
    "normalize_positions",
    "position_facts",
    "relative_offsets",
]


def normalize_positions(
    pos: object,
    b: int,
    n: int,
    name: str = "pos",
    axes: int | None = None,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Integer positions as int64 ``(1|b, n)`` (or coordinates ``(1|b, n, axes)``);
    static checks only (dtype, shape). ``(n,)`` and ``(n, axes)`` gain a batch axis of
    1, which is kept: a batch that shares positions builds one table, not ``b``."""
    what = (
        f"({n},) or ({b}, {n})"
        if axes is None
        else f"({n}, {axes}) or ({b}, {n}, {axes})"
    )
    if not isinstance(pos, torch.Tensor):
        if isinstance(pos, (str, bytes)) or pos is None:
            raise TypeError(f"{name} must be integer positions {what}, got {pos!r}")
        pos = torch.as_tensor(pos, device=device)
    check_integer(pos, name)
    rank = 1 if axes is None else 2  # dims of one sequence's positions
    if pos.dim() == rank:
        pos = pos.unsqueeze(0)
    if (
        pos.dim() != rank + 1
        or pos.shape[1] != n
        or pos.shape[0] not in (1, b)
        or (axes is not None and pos.shape[2] != axes)
    ):
        raise ValueError(
            f"{name} must have shape {what} to match the sequence, "
            f"got {tuple(pos.shape)}"
        )
    return pos.to(device=device, dtype=torch.long)


class Positions:
    """The positions of one forward pass, checked once, read by every layer.

    * ``q`` ``(1|b, i)``, ``k`` ``(1|b, j)`` int64 (or ``(1|b, ., a)`` coordinates).
    * ``causal``; ``run``: every row's keys are ``s .. s+j-1`` and its queries the
      last ``i`` of them, so causal attention is the token-order triangle
      (``ordered``) and needs no ``n x n`` mask; always true for coordinates, which
      are causal in token order.
    * ``lo``, ``hi``: the smallest and largest key-minus-query offset, ``top`` the
      largest position (sequences).
    * ``user_mask``: the caller's bool mask (True = may attend), or None; ``mask``:
      it combined with ``causal``, ``(b|1, 1|h, i, j)``, built on first use.
    * ``inputs``: the caller's named side inputs (graph distances, 3-D points...).
    * ``reuse(key, build)``: ``build()`` once per forward pass.
    """

    def __init__(self, q, k, causal, run, lo, hi, user_mask, inputs, coords):
        self.q, self.k, self.causal, self.run = q, k, causal, run
        self.lo, self.hi, self.user_mask, self.top = lo, hi, user_mask, None
        self.inputs, self.coords = inputs, coords
        self.memo: dict = {}
        self.names = ("q_pos", "k_pos")  # what the caller called them, for errors

    @classmethod
    def build(
        cls,
        b: int,
        i: int,
        j: int,
        q_pos: object = None,
        k_pos: object = None,
        causal: bool = False,
        mask: torch.Tensor | None = None,
        inputs: Mapping[str, torch.Tensor] | None = None,
        axes: int | None = None,
        heads: int = 1,
        device: torch.device | None = None,
        names: tuple[str, str] = ("q_pos", "k_pos"),
    ) -> "Positions":
        """Check and normalise a call's positions: ``i`` queries, ``j`` keys.

        ``None`` positions mean keys ``0 .. j-1`` and queries the last ``i`` of them
        (a KV cache); coordinates (``axes``) have no default. ``names``: what the
        caller called the two in its errors (``("pos", "pos")`` for a model or a
        layer, which take one ``pos``)."""
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {causal!r}")
        q_name, k_name = names
        for name, p, n in ((k_name, k_pos, j), (q_name, q_pos, i)):
            if axes is not None and p is None:
                raise ValueError(
                    f"{name} is required: this encoding reads {axes} integer "
                    f"coordinates per token, shape ({n}, {axes}) or ({b}, {n}, {axes})"
                )
        if q_pos is None and k_pos is None and i > j:
            raise ValueError(
                f"with default positions the {i} queries must not outnumber the {j} "
                "keys; pass q_pos/k_pos"
            )
        if mask is not None:
            check_bool_mask(mask, (b, heads, i, j), "(b, h, i, j) =")
            mask = mask.to(device)  # like the positions: built anywhere, used here
        if inputs and device is not None:
            inputs = {
                name: t.to(device) if isinstance(t, torch.Tensor) else t
                for name, t in inputs.items()
            }
        default_k = k_pos is None
        k = (
            torch.arange(j, device=device)[None]
            if default_k
            else normalize_positions(k_pos, b, j, k_name, axes, device)
        )
        q = (
            k[:, j - i :]
            if default_k and q_pos is None and i <= j
            else torch.arange(max(j - i, 0), max(j - i, 0) + i, device=device)[None]
            if q_pos is None
            else normalize_positions(q_pos, b, i, q_name, axes, device)
        )
        coords = axes is not None
        self = cls(q, k, causal, coords, None, None, mask, dict(inputs or {}), coords)
        self.names = names
        if default_k and q_pos is None:  # known from the shapes: no data to check
            self.run, self.lo, self.hi, self.top = True, 1 - j, i - 1, j - 1
            return self._check_rows() if mask is not None else self
        if compiling():  # no data-dependent checks inside a compiled graph
            return self
        return self._check_data(i, j)

    def _check_data(self, i: int, j: int) -> "Positions":
        """Every data-dependent fact and check in one host synchronisation."""
        q, k = self.q, self.k
        facts = {"q": q.min(), "k": k.min()}
        if not self.coords:
            facts["lo"], facts["hi"] = k.min() - q.max(), k.max() - q.min()
            facts["top"] = torch.maximum(q.max(), k.max())
            if i <= j:
                run = k[:, :1] + torch.arange(j, device=k.device)  # (1|b, j)
                facts["run"] = (k == run).all() & (q == run[:, j - i :]).all()
        if self.user_mask is not None:
            self.memo["mask"] = allowed = self._combined()
            facts["rows"] = allowed.any(-1).all()
        elif self.causal and not self.coords:  # a key at or before every query
            facts["rows"] = (k.amin(-1, keepdim=True) <= q).all()  # O(n), no mask
        values = torch.stack([t.to(torch.long) for t in facts.values()]).tolist()
        got = dict(zip(facts, values))  # the one sync above
        for key, name in zip("qk", self.names):
            if got[key] < 0:
                raise ValueError(f"{name} must be >= 0, got a minimum of {got[key]}")
        if not self.coords:
            self.lo, self.hi, self.top = got["lo"], got["hi"], got["top"]
            self.run = bool(got.get("run"))
        if not got.get("rows", True):
            raise ValueError(
                "mask/causal leave a query with no key to attend to; every query "
                "needs at least one key"
            )
        return self

    def _check_rows(self) -> "Positions":
        if not compiling() and not bool(self._combined().any(-1).all()):
            raise ValueError(
                "mask/causal leave a query with no key to attend to; every query "
                "needs at least one key"
            )
        return self

    @property
    def ordered(self) -> bool:
        """Causal in token order: query t sees keys ``0 .. t + j - i``."""
        return self.causal and self.run and self.q.shape[1] <= self.k.shape[1]

    def _combined(self) -> torch.Tensor | None:
        i, j = self.q.shape[1], self.k.shape[1]
        allowed = None
        if self.causal and self.run:  # token order (coordinates, runs)
            allowed = torch.ones(i, j, dtype=torch.bool, device=self.k.device)
            allowed = allowed.tril(j - i)  # (i, j)
        elif self.causal:  # query position p sees key positions <= p
            allowed = self.k[:, None, None, :] <= self.q[:, None, :, None]
        if self.user_mask is not None:
            m = self.user_mask
            allowed = m if allowed is None else allowed & m
        return allowed

    @property
    def mask(self) -> torch.Tensor | None:
        """The combined bool mask ``(b|1, 1|h, i, j)`` (True = may attend), or None
        when every key is visible; built once per forward pass."""
        return self.reuse("mask", self._combined)

    def reuse(self, key: Hashable, build: Callable[[], object]):
        """``build()``, computed once per forward pass under ``key``."""
        if key not in self.memo:
            self.memo[key] = build()
        return self.memo[key]

    def offsets(self) -> tuple[Callable[..., torch.Tensor], int, int]:
        """``relative_offsets`` of these positions, with their range known."""
        return relative_offsets(self.q, self.k, self)


def position_facts(q_pos: torch.Tensor, k_pos: torch.Tensor, ctx=None) -> Positions:
    """The call's ``Positions`` (``ctx.positions``: its facts are known, no sync),
    or, for a hook called on its own, the facts of ``q_pos``, ``k_pos`` (one sync):
    ``lo``, ``hi`` (key-minus-query offsets), ``top`` (largest position), ``run``."""
    known = getattr(ctx, "positions", None)
    if known is not None and known.lo is not None:
        return known
    facts = Positions(q_pos, k_pos, False, False, None, None, None, {}, False)
    return facts._check_data(q_pos.shape[1], k_pos.shape[1])


def relative_offsets(
    q_pos: torch.Tensor, k_pos: torch.Tensor, positions: Positions | None = None
) -> tuple[Callable[..., torch.Tensor], int, int]:
    """Key-minus-query offsets for a score_mod: ``(off, lo, hi)`` with
    ``off(b, q_idx, kv_idx) = k_pos[b, kv_idx] - q_pos[b, q_idx]`` and every offset of
    the call in ``lo .. hi``.

    When every row's keys are a run ``s, s+1, ...`` and its queries the last ``i`` of
    them, the offset is ``kv_idx - q_idx - (j - i)`` whatever ``s`` is: index
    arithmetic with shape constants, which a compiled kernel does without a memory
    load. Otherwise ``off`` reads the positions. With ``positions`` (this call's
    :class:`Positions`) the facts are read from it; without, they cost a sync.
    """
    i, j = q_pos.shape[1], k_pos.shape[1]
    facts = position_facts(q_pos, k_pos, positions and _Ctx(positions))
    lo, hi, run = facts.lo, facts.hi, facts.run
    if run:
        return (lambda b, q_idx, kv_idx: kv_idx - q_idx - (j - i)), lo, hi
    qp, kp = q_pos, k_pos
    if qp.shape[0] == 1 and kp.shape[0] == 1:  # shared by the batch
        return (lambda b, q_idx, kv_idx: kp[0, kv_idx] - qp[0, q_idx]), lo, hi
    rows = max(qp.shape[0], kp.shape[0])
    qp, kp = qp.expand(rows, i), kp.expand(rows, j)
    return (lambda b, q_idx, kv_idx: kp[b, kv_idx] - qp[b, q_idx]), lo, hi


class _Ctx:  # what position_facts reads of a Context
    def __init__(self, positions: Positions):
        self.positions = positions


def as_positions(
    pos,
    b: int,
    n: int,
    name: str = "pos",
    start: int = 0,
    device=None,
    axes: int | None = None,
) -> torch.Tensor:
    """Integer positions as int64 ``(b, n)`` (or ``(b, n, axes)``); ``None`` means
    ``start .. start+n-1``. Negative positions are refused."""
    device = None if device is None else as_device(device)
    check_nonnegative_int(b, "b")
    check_nonnegative_int(n, "n")
    if pos is None and axes is None:
        return torch.arange(start, start + n, device=device).expand(b, n)
    if pos is None:
        raise ValueError(f"{name} is required: {axes} integer coordinates per token")
    pos = normalize_positions(pos, b, n, name, axes, device)
    if pos.numel() and int(pos.min()) < 0:
        raise ValueError(f"{name} must be >= 0, got a minimum of {int(pos.min())}")
    return pos.expand(b, *pos.shape[1:])


def prepare(
    pe,
    b,
    h,
    i,
    j,
    q_pos=None,
    k_pos=None,
    causal=False,
    mask=None,
    inputs=None,
    device=None,
    names=("q_pos", "k_pos"),
) -> Positions:
    """The ``Positions`` of a call (or a forward pass, or a decoding step): every
    check that depends on the call and not on the layer, run once, against what the
    encoding ``pe`` requires (``causal_only``, ``side_inputs``, ``coord_axes``).
    ``names``: the caller's names of the positions, for its errors."""
    device = None if device is None else as_device(device)
    if pe.causal_only and causal is not True:
        raise ValueError(
            f"{type(pe).__name__} is defined for causal attention only: "
            "pass causal=True"
        )
    missing = [name for name in pe.side_inputs if name not in (inputs or {})]
    if missing:
        wanted = "; ".join(f"{m}: {pe.side_inputs[m]}" for m in missing)
        raise ValueError(
            f"{type(pe).__name__} needs the side input(s) {missing} in inputs= "
            f"({wanted})"
        )
    return Positions.build(
        b, i, j, q_pos, k_pos, causal, mask, inputs, pe.coord_axes, h, device, names
    )


def prepare_step(pe, cache, b: int, h: int, n: int, pos, mask, device) -> Positions:
    """The ``Positions`` of a decoding step: ``n`` new queries (at ``pos``, or after
    the tokens a ``KVCache`` holds) against every cached key and the new ones, causal.
    One host synchronisation (the position checks); a model prepares them once per
    step, for every layer (whose caches hold the same tokens)."""
    if pos is None:
        pos = cache.next_positions(n, device)
    new = normalize_positions(pos, b, n, "pos", pe.coord_axes, device)
    keys = cache.joined_positions(new)  # (1|b, j[, a])
    return prepare(
        pe, b, h, n, keys.shape[1], new, keys, True, mask, None, device, ("pos", "pos")
    )


def check_prepared(positions, integer_args: str) -> None:
    """``positions=`` takes what ``prepare`` returns, not integer positions."""
    if positions is not None and not isinstance(positions, Positions):
        raise TypeError(
            "positions= takes the Positions that pl.prepare(...) returns, prepared "
            f"once for every layer of a model; got a {type(positions).__name__}: "
            f"pass integer positions as {integer_args}"
        )
