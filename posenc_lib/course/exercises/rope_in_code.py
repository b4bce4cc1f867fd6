"""Checks for the exercises of book/part7/rope_in_code.ipynb."""

from __future__ import annotations

import torch

import posenc_lib as pl
from posenc_lib.course.exercises import (
    Wrong,
    call,
    exercise,
    expect,
    expect_close,
    plant,
)

CHAPTER = "part7/rope_in_code"


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- ex-rope-in-code-vo

VO_STUB = '''\
def permute_values(W_v, W_o, n_heads):
    """Permute the rows of W_v (h*d, D) by the conversion's permutation Pi, head by
    head (as interleaved_to_half does to W_q and W_k), and change W_o (D, h*d) so
    that the layer's output is unchanged; return (new W_v, new W_o)."""
    ...  # your code
'''


@exercise("ex-rope-in-code-vo", chapter=CHAPTER, stub=VO_STUB)
def _(answer):
    gen = _gen(0)
    for h, d, D in ((2, 4, 8), (4, 8, 16)):
        desc = f"h = {h} heads of d = {d}, D = {D}"
        W_v = torch.randn(h * d, D, generator=gen, dtype=torch.float64)
        W_o = torch.randn(D, h * d, generator=gen, dtype=torch.float64)
        out = call(answer, W_v.clone(), W_o.clone(), h, desc=desc)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise Wrong(f"on {desc}, return a tuple (new W_v, new W_o)")
        new_v, new_o = (torch.as_tensor(t).double() for t in out)
        expect_close(
            new_v, pl.interleaved_to_half(W_v, h), desc=desc, what="your new W_v"
        )
        expect(
            tuple(new_o.shape) == (D, h * d),
            f"on {desc}, your new W_o has shape {tuple(new_o.shape)}, expected "
            f"({D}, {h * d})",
        )
        if torch.allclose(new_o, W_o):
            raise Wrong(
                f"on {desc}, W_o is unchanged: it now reads permuted value coordinates "
                "and the layer's output changes"
            )
        if torch.allclose(new_o, pl.interleaved_to_half(W_o, h)):
            raise Wrong(
                f"on {desc}, you permuted the rows of W_o: its rows are the model's "
                "output coordinates; it reads the values through its columns"
            )
        # the layer is linear in the values: W_o z = new W_o (Pi z) for every z
        expect_close(
            new_o @ new_v,
            W_o @ W_v,
            desc=desc,
            what="new W_o @ new W_v (the value path)",
            atol=1e-8,
        )
    return (
        "W_v's rows are permuted as interleaved_to_half does, and new W_o @ new W_v "
        "equals W_o @ W_v for (h, d) = (2, 4) and (4, 8): the output is unchanged."
    )


plant(
    "ex-rope-in-code-vo",
    lambda W_v, W_o, h: (pl.interleaved_to_half(W_v, h), W_o),
    says="W_o is unchanged",
)
plant(
    "ex-rope-in-code-vo",
    lambda W_v, W_o, h: (
        pl.interleaved_to_half(W_v, h),
        pl.interleaved_to_half(W_o, h),
    ),
    says="rows of W_o",
)
plant(
    "ex-rope-in-code-vo",
    lambda W_v, W_o, h: (
        pl.interleaved_to_half(W_v, h),
        pl.half_to_interleaved(W_o.T, h).T,
    ),
    says="(the value path)",
)
plant("ex-rope-in-code-vo", lambda W_v, W_o, h: W_v, says="return a tuple")

# ---------------------------------------------------------------- ex-rope-in-code-gqa

GQA_STUB = """\
# the row order of the 16-row W_k (2 key-value heads of d = 8): new row j is old
# row order[j]; with interleaved_to_half(W_k, 4) (wrong) and the right conversion
gqa_rows = ...  # your answer: (wrong_order, right_order), two lists of 16 ints
"""


def _order(value, name: str) -> list[int]:
    if isinstance(value, torch.Tensor):
        value = value.flatten().tolist()
    if not isinstance(value, (list, tuple)) or len(value) != 16:
        raise Wrong(f"`{name}` should be a list of the 16 row indices")
    return [int(v) for v in value]


@exercise("ex-rope-in-code-gqa", chapter=CHAPTER, stub=GQA_STUB)
def _(answer):
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Wrong("`gqa_rows` should be a tuple (wrong_order, right_order)")
    wrong, right = _order(answer[0], "wrong_order"), _order(answer[1], "right_order")
    rows = torch.arange(16)[:, None]  # each row holds its own index
    want_wrong = pl.interleaved_to_half(rows, 4).flatten().tolist()
    want_right = pl.interleaved_to_half(rows, 2).flatten().tolist()
    for name, got, want in (
        ("wrong_order", wrong, want_wrong),
        ("right_order", right, want_right),
    ):
        if got == want:
            continue
        inverse = torch.argsort(torch.tensor(want)).tolist()
        if got == inverse:
            raise Wrong(
                f"`{name}` is the inverse order: give, for each new row j, the old row "
                "it comes from"
            )
        if got == (want_right if name == "wrong_order" else want_wrong):
            raise Wrong("your two orders are swapped: which blocks does each call see?")
        j = next(j for j in range(16) if got[j] != want[j])
        raise Wrong(f"`{name}` puts old row {got[j]} at new row {j}")
    return (
        "both orders equal pl.interleaved_to_half applied to the row indices with "
        "n_heads = 4 (wrong) and n_heads = n_kv_heads = 2 (right)."
    )


_W = [0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15]
_R = [0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15]
plant("ex-rope-in-code-gqa", (_R, _W), says="swapped")
plant(
    "ex-rope-in-code-gqa",
    (_W, torch.argsort(torch.tensor(_R)).tolist()),
    says="inverse order",
)
plant("ex-rope-in-code-gqa", (_W, list(range(16))), says="puts old row")
plant("ex-rope-in-code-gqa", (_W, _R[:8]), says="16 row indices")

# ------------------------------------------------------- ex-rope-in-code-partial

PARTIAL_STUB = '''\
def convert_partial(W, n_heads, r):
    """Rows of W (h*d, D), a GPT-J-style (interleaved) query or key projection that
    rotates the first r coordinates of each head, rearranged for GPT-NeoX's half
    layout (rotate_half on the first r coordinates); a new tensor."""
    ...  # your code
'''


def _scores(W_q, W_k, x, pos, theta, layout, r):
    q = pl.apply_rope(x @ W_q.T, pos, theta, layout, rotary_dim=r)
    k = pl.apply_rope(x @ W_k.T, pos, theta, layout, rotary_dim=r)
    return q @ k.T


@exercise("ex-rope-in-code-partial", chapter=CHAPTER, stub=PARTIAL_STUB)
def _(answer):
    gen = _gen(1)
    for h, d, r, D in ((1, 8, 4, 6), (2, 8, 4, 6), (3, 12, 8, 10)):
        desc = f"h = {h} heads of d = {d}, r = {r}"
        W_q = torch.randn(h * d, D, generator=gen, dtype=torch.float64)
        W_k = torch.randn(h * d, D, generator=gen, dtype=torch.float64)
        new_q = call(answer, W_q.clone(), h, r, desc=desc)
        new_k = call(answer, W_k.clone(), h, r, desc=desc)
        new_q, new_k = (torch.as_tensor(t).double() for t in (new_q, new_k))
        expect(
            tuple(new_q.shape) == tuple(W_q.shape),
            f"on {desc}, your W has shape {tuple(new_q.shape)}, expected "
            f"{tuple(W_q.shape)}",
        )
        blocks = new_q.reshape(h, d, D)
        if not torch.equal(blocks[:, r:], W_q.reshape(h, d, D)[:, r:]):
            raise Wrong(
                f"on {desc}, rows r .. d-1 of a head changed: they pass through "
                "unrotated and must stay where they are"
            )
        x = torch.randn(5, D, generator=gen, dtype=torch.float64)
        pos = torch.randint(0, 40, (5,), generator=gen)
        theta, _ = pl.rope_inv_freq(r)
        for head in range(h):
            rows = slice(head * d, (head + 1) * d)
            want = _scores(W_q[rows], W_k[rows], x, pos, theta, "interleaved", r)
            got = _scores(new_q[rows], new_k[rows], x, pos, theta, "half", r)
            if not torch.allclose(got, want, atol=1e-8):
                raise Wrong(
                    f"on {desc}, head {head}'s scores in the half layout differ from "
                    "the checkpoint's (largest gap "
                    f"{float((got - want).abs().max()):.3g})"
                )
    return (
        "every head's scores in the half layout equal the interleaved checkpoint's, "
        "and the pass-through rows stay put, for (h, d, r) = (1, 8, 4), (2, 8, 4), "
        "(3, 12, 8)."
    )


def _whole_head(W, n_heads, r):
    return pl.interleaved_to_half(W, n_heads)


def _inverse(W, n_heads, r):
    d = W.shape[0] // n_heads
    Wh = W.clone().reshape(n_heads, d, -1)
    Wh[:, :r] = Wh[:, :r][:, torch.argsort(pl.layout_permutation(r))]
    return Wh.reshape(W.shape)


plant("ex-rope-in-code-partial", _whole_head, says="pass through unrotated")
plant("ex-rope-in-code-partial", _inverse, says="scores in the half layout differ")
plant("ex-rope-in-code-partial", lambda W, h, r: W.reshape(h, r), says="raised")

# --------------------------------------------------- ex-rope-in-code-one-layout

ONE_LAYOUT_STUB = '''\
def to_one_layout(state, layouts, n_heads, target="half"):
    """A state dict for a model rotating every block with `target`, from one whose
    block l rotates with layouts[l] ("half" or "interleaved")."""
    ...  # your code
'''

_FROM = {"interleaved": pl.interleaved_to_half, "half": pl.half_to_interleaved}
_BACK = {"interleaved": pl.half_to_interleaved, "half": pl.interleaved_to_half}


def _layout_model(layouts, n_heads, seed):
    """A float64 TinyTransformer whose block l rotates with layouts[l]."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        pes = [pl.Rotary(16 // n_heads, layout=layout) for layout in layouts]
        model = pl.TinyTransformer(11, 16, n_heads, len(layouts), pe=pes)
    return model.double().eval()


@exercise("ex-rope-in-code-one-layout", chapter=CHAPTER, stub=ONE_LAYOUT_STUB)
def _(answer):
    cases = (
        (["interleaved", "half"], 2, "half"),
        (["half", "interleaved", "half"], 2, "interleaved"),
    )
    for seed, (layouts, h, target) in enumerate(cases):
        desc = f"layouts {layouts}, target {target!r}, {h} heads of d = {16 // h}"
        model = _layout_model(layouts, h, seed)
        state = model.state_dict()
        out = call(answer, state, list(layouts), h, target, desc=desc)
        expect(
            isinstance(out, dict) and set(out) == set(state),
            f"on {desc}, return a state dict with the same names as the one given",
        )
        for name, W in state.items():
            got = torch.as_tensor(out[name]).double()
            expect(
                tuple(got.shape) == tuple(W.shape),
                f"on {desc}, {name} has shape {tuple(got.shape)}, expected "
                f"{tuple(W.shape)}",
            )
            layer = int(name.split(".")[1]) if name.startswith("blocks.") else None
            qk = name.endswith(("w_q.weight", "w_k.weight"))
            if layer is None or not qk or layouts[layer] == target:
                if not torch.equal(got, W):
                    why = (
                        f"block {layer} already rotates with {target!r}"
                        if qk
                        else "only W_q and W_k meet the rotation"
                    )
                    raise Wrong(f"on {desc}, {name} changed: {why}")
                continue
            if torch.equal(got, W):
                raise Wrong(
                    f"on {desc}, {name} is unchanged, but block {layer} was trained "
                    f"{layouts[layer]!r}"
                )
            if torch.equal(got, _BACK[layouts[layer]](W, h)):
                raise Wrong(
                    f"on {desc}, {name} is permuted the wrong way round: from "
                    f"{target!r} to {layouts[layer]!r}"
                )
            expect_close(got, _FROM[layouts[layer]](W, h), desc=desc, what=name)
        port = _layout_model([target] * len(layouts), h, seed)
        port.load_state_dict(out)
        tokens = torch.randint(0, 11, (2, 9), generator=_gen(seed))
        with torch.no_grad():
            expect_close(
                port(tokens),
                model(tokens),
                desc=desc,
                what="the logits of the one-layout model",
                atol=1e-9,
            )
    return (
        "with your state dict a model rotating every block with the target layout "
        "gives the trained model's logits, for two blocks (interleaved, half) to half "
        "and three (half, interleaved, half) to interleaved."
    )


def _every_block(state, layouts, n_heads, target="half"):
    out = dict(state)
    for layer in range(len(layouts)):
        for w in ("w_q", "w_k"):
            name = f"blocks.{layer}.attn.{w}.weight"
            out[name] = pl.interleaved_to_half(state[name], n_heads)
    return out


def _converted(state, layouts, n_heads, target, table, weights=("w_q", "w_k")):
    out = dict(state)
    for layer, layout in enumerate(layouts):
        if layout != target:
            for w in weights:
                name = f"blocks.{layer}.attn.{w}.weight"
                out[name] = table[layout](state[name], n_heads)
    return out


plant(
    "ex-rope-in-code-one-layout",
    lambda s, lay, h, target="half": _converted(s, lay, h, target, _BACK),
    says="the wrong way round",
)
plant(
    "ex-rope-in-code-one-layout",
    lambda s, lay, h, target="half": _converted(s, lay, h, target, _FROM, ("w_q",)),
    says="w_k.weight is unchanged",
)
plant("ex-rope-in-code-one-layout", _every_block, says="already rotates")
plant(
    "ex-rope-in-code-one-layout",
    lambda s, lay, h, target="half": list(s.values()),
    says="return a state dict",
)
