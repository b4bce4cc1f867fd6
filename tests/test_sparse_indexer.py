"""DeepSeek Sparse Attention (``posenc_lib/encodings/sparse_indexer.py``): properties of
the indexer's own RoPE and of the top-k selection first, then the sparse attention
behind the hooks, then golden values recorded from the models' own indexer classes in
transformers 5.24 (``tests/golden/make_sparse_indexer_golden.py``)."""

import json
import math
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.course.indexers_data import INDEXERS, indexer_table
from posenc_lib.encodings.sparse_indexer import (
    LightningIndexer,
    SparseAttention,
    convert_indexer_layout,
    indexer_kl_loss,
    indexer_scores,
    rope_slice,
    top_k_mask,
)

GOLDEN = json.loads(
    (pathlib.Path(__file__).parent / "golden" / "sparse_indexer_hf.json").read_text()
)
SPECS = {s.model: s for s in INDEXERS}
OTHER = {"half": "interleaved", "interleaved": "half"}


def indexer(layout="half", slice_order="rot_first", seed=0, rotary_dim=8, **kw):
    torch.manual_seed(seed)
    return LightningIndexer(
        24, 4, 16, rotary_dim, layout=layout, slice_order=slice_order, **kw
    ).double()


def causal(n):
    return torch.ones(n, n, dtype=torch.bool).tril()[None]


# ---- properties: the indexer's RoPE ----


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("order", ["rot_first", "rot_last"])
def test_indexer_scores_depend_only_on_offsets(layout, order):
    idx = indexer(layout, order)
    x = torch.randn(2, 9, 24, dtype=torch.float64)
    pos = torch.arange(9)[None]
    assert_close(idx(x, x, pos, pos), idx(x, x, pos + 1000, pos + 1000))


def test_rope_slice_rotates_the_first_or_the_last_coordinates():
    x = torch.randn(2, 3, 5, 12, dtype=torch.float64)
    pos, inv = torch.arange(5), pl.rope_inv_freq(8, 10000.0)[0]
    first = rope_slice(x, pos, inv, "half", 8, "rot_first")
    assert_close(first, pl.apply_rope(x, pos, inv, "half", rotary_dim=8))
    last = rope_slice(x, pos, inv, "interleaved", 8, "rot_last")
    assert_close(last[..., :4], x[..., :4])  # the pass slice, untouched
    assert_close(last[..., 4:], pl.apply_rope(x[..., 4:], pos, inv, "interleaved"))
    assert rope_slice(x, pos, inv[:0], "half", 0) is x  # rotary_dim 0: no RoPE


@pytest.mark.parametrize("order", ["rot_first", "rot_last"])
@pytest.mark.parametrize("source", ["half", "interleaved"])
def test_the_layouts_differ_by_a_permutation_of_the_indexer_rows(source, order):
    """Weights trained with one layout, run by code that rotates in the other, give
    the same scores once the rotated rows of every head of W_q and W_k are permuted
    (pl.layouts), with the key LayerNorm's gain and bias on them; W_w and the pass
    rows are left alone. Permuting W_q and W_k alone is not enough once the norm
    has left its initial values (gain 1, bias 0)."""
    trained = indexer(source, order)
    with torch.no_grad():  # a trained indexer: every parameter away from its init
        for t in trained.parameters():
            t.add_(0.3 * torch.randn_like(t))
    x = torch.randn(2, 11, 24, dtype=torch.float64)
    pos = torch.arange(11)[None] + 5
    right = trained(x, x, pos, pos)
    run = indexer(OTHER[source], order)
    run.load_state_dict(trained.state_dict())
    assert (run(x, x, pos, pos) - right).abs().max() > 1e-2 * right.abs().max()
    with torch.no_grad():  # the projections' rows only
        for w, heads in ((run.w_q.weight, 4), (run.w_k.weight, 1)):
            w.copy_(convert_indexer_layout(w, heads, 8, order, source, OTHER[source]))
    assert (run(x, x, pos, pos) - right).abs().max() > 1e-3 * right.abs().max()
    fixed = trained.with_layout(OTHER[source])
    assert fixed.layout == OTHER[source] and trained.layout == source
    assert_close(fixed(x, x, pos, pos), right)
    pass_rows = slice(8, 16) if order == "rot_first" else slice(0, 8)
    assert_close(fixed.w_k.weight[pass_rows], trained.w_k.weight[pass_rows])
    assert_close(fixed.w_w.weight, trained.w_w.weight)
    assert_close(fixed.with_layout(source)(x, x, pos, pos), right)


def test_a_wrong_layout_changes_the_selection():
    trained, wrong = indexer("half"), indexer("interleaved")
    wrong.load_state_dict(trained.state_dict())
    x = torch.randn(4, 32, 24, dtype=torch.float64)
    pos = torch.arange(32)[None]
    pick = [top_k_mask(m(x, x, pos, pos), 4, causal(32), pos) for m in (trained, wrong)]
    changed = (pick[0] != pick[1]).any(-1).float().mean()
    assert changed > 0.3, f"only {changed:.2f} of the rows changed"


# ---- properties: the selection ----


def test_top_k_keeps_every_key_of_a_short_row_and_k_of_the_others():
    scores = torch.randn(2, 10, 10, dtype=torch.float64)
    pos = torch.arange(10)[None]
    chosen = top_k_mask(scores, 4, causal(10), pos)
    assert chosen.sum(-1).tolist() == [[min(i + 1, 4) for i in range(10)]] * 2
    assert not (chosen & ~causal(10)).any()  # never a key the query may not see
    ref = scores.masked_fill(~causal(10), float("-inf")).topk(4, -1).indices
    for b, i in [(0, 9), (1, 5)]:  # distinct scores: torch's top-k
        assert set(chosen[b, i].nonzero().flatten().tolist()) == set(ref[b, i].tolist())


def test_ties_go_to_the_later_position_whatever_the_token_order():
    scores = torch.zeros(1, 1, 6, dtype=torch.float64)  # ReLU's zeros: all tied
    pos = torch.tensor([[4, 0, 5, 1, 3, 2]])
    chosen = top_k_mask(scores, 2, None, pos)
    assert pos[0][chosen[0, 0]].tolist() == [4, 5]
    assert top_k_mask(scores, 2)[0, 0].nonzero().flatten().tolist() == [4, 5]


# ---- sparse attention behind the hooks ----


def sparse(top_k=3, seed=0, layout="half"):
    idx = indexer(layout, seed=seed)
    return SparseAttention(idx, top_k, pl.Rotary(6, layout="interleaved")).double()


def test_sparse_attention_is_the_main_attention_on_the_selected_keys():
    pe = sparse()
    torch.manual_seed(1)
    q, k, v = torch.randn(3, 2, 4, 12, 6, dtype=torch.float64)
    x = torch.randn(2, 12, 24, dtype=torch.float64)
    pos = torch.arange(12)[None] + 7
    out = pl.attention(q, k, v, pe, pos, pos, causal=True, x=x)
    keep = top_k_mask(pe.indexer(x, x, pos, pos), 3, causal(12), pos)  # (b, i, j)
    dense = pl.attention(q, k, v, pe.main, pos, pos, mask=keep[:, None])
    assert_close(out, dense)
    wide = SparseAttention(pe.indexer, 12, pe.main)  # k >= n: every key
    assert_close(
        pl.attention(q, k, v, wide, pos, pos, causal=True, x=x),
        pl.attention(q, k, v, pe.main, pos, pos, causal=True),
    )


@pytest.mark.parametrize("steps", [[12], [5, 1, 1, 3, 2], [1] * 12])
def test_cached_decoding_selects_as_the_full_forward(steps):
    torch.manual_seed(0)
    attn = pl.MultiHeadAttention(24, 4, sparse(top_k=3)).double()
    x = torch.randn(2, 12, 24, dtype=torch.float64)
    pos = torch.arange(4, 16)
    full = attn(x, pos, causal=True)
    cache, outs, start = pl.KVCache(), [], 0
    for size in steps:
        outs.append(
            attn(
                x[:, start : start + size],
                pos[start : start + size],
                causal=True,
                cache=cache,
            )
        )
        start += size
    assert_close(torch.cat(outs, 1), full)


def test_a_model_with_a_small_top_k_decodes_and_never_reads_later_tokens():
    torch.manual_seed(0)
    layers = [sparse(top_k=3, seed=s) for s in (0, 1)]
    model = pl.TinyTransformer(11, 24, 4, 2, layers).double().eval()
    tokens = torch.randint(0, 11, (2, 12))
    full = model(tokens)
    cache = model.new_cache()
    steps = [model(tokens[:, :5], cache=cache)]
    steps += [model(tokens[:, t : t + 1], cache=cache) for t in range(5, 12)]
    cached = torch.cat(steps, 1)
    assert_close(cached, full)
    changed = tokens.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % 11
    assert_close(model(changed)[:, :7], full[:, :7])


def test_the_selection_follows_the_positions_not_the_token_order():
    pe = sparse()
    torch.manual_seed(2)
    q, k, v = torch.randn(3, 1, 4, 10, 6, dtype=torch.float64)
    x = torch.randn(1, 10, 24, dtype=torch.float64)
    pos = torch.arange(10)[None]
    full = pl.attention(q, k, v, pe, pos, pos, causal=True, x=x)
    rev = torch.arange(9, -1, -1)
    out = pl.attention(
        q[:, :, rev],
        k[:, :, rev],
        v[:, :, rev],
        pe,
        pos[:, rev],
        pos[:, rev],
        causal=True,
        x=x[:, rev],
    )
    assert_close(out, full[:, :, rev])


def test_no_gradient_reaches_the_indexer_through_attention_and_the_kl_trains_it():
    """The 0/-inf bias carries no gradient; the KL loss trains the indexer and
    leaves the main attention's weights (detached) alone."""
    pe = sparse()
    attn = pl.MultiHeadAttention(24, 4, pe).double()
    x = torch.randn(2, 10, 24, dtype=torch.float64)
    out, weights = attn(x, causal=True, return_weights=True, path="reference")
    out.square().sum().backward(retain_graph=True)
    assert all(p.grad is None for p in pe.indexer.parameters())
    assert attn.w_q.weight.grad is not None
    attn.zero_grad()
    pos = torch.arange(10)[None]
    loss = indexer_kl_loss(pe.indexer(x, x, pos, pos), weights, causal(10))
    loss.backward()
    assert all(p.grad is not None for p in pe.indexer.parameters())
    assert attn.w_q.weight.grad is None and attn.w_k.weight.grad is None


def test_the_kl_loss_is_the_kl_divergence_and_zero_at_the_target():
    w = torch.softmax(torch.randn(1, 2, 5, 5, dtype=torch.float64), -1)
    p = w.sum(1) / 2  # heads summed, L1-normalised
    assert indexer_kl_loss(p.log(), w).abs() < 1e-12  # softmax(log p) = p
    scores = torch.randn(1, 5, 5, dtype=torch.float64)
    expected = (p * (p.log() - scores.log_softmax(-1))).sum(-1).mean()
    assert_close(indexer_kl_loss(scores, w), expected)
    keep = causal(5)
    p_c = w.sum(1).masked_fill(~keep, 0)
    p_c = p_c / p_c.sum(-1, keepdim=True)
    log_q = scores.masked_fill(~keep, float("-inf")).log_softmax(-1)
    terms = torch.where(keep, p_c * (p_c.log() - log_q), torch.zeros_like(p_c))
    assert_close(indexer_kl_loss(scores, w, keep), terms.sum(-1).mean())


# ---- clear errors ----


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda: LightningIndexer(24, layout="halves"), "layout must be one of"),
        (lambda: LightningIndexer(24, slice_order="first"), "slice_order must be"),
        (lambda: LightningIndexer(24, d_index=16, rotary_dim=18), "rotary_dim must be"),
        (lambda: LightningIndexer(24, rotary_dim=3), "rotary_dim must be an even"),
        (lambda: SparseAttention(indexer(), 0), "top_k must be > 0"),
        (lambda: SparseAttention(indexer(), 2, pl.ALiBi(4)), "overrides.*score_bias"),
        (lambda: SparseAttention(pl.Rotary(8), 2), "indexer must be a Lightning"),
        (lambda: top_k_mask(torch.zeros(1, 2, 2), 1.5), "top_k must be an int"),
        (lambda: indexer_scores(*torch.zeros(3, 2, 2)), "indexer_scores takes"),
        (
            lambda: convert_indexer_layout(torch.zeros(8, 4), 2, 4, target="x"),
            "target must be one of",
        ),
    ],
)
def test_bad_arguments_are_named(make, says):
    with pytest.raises((ValueError, TypeError), match=says):
        make()


def test_an_indexer_without_every_keys_input_is_refused_with_the_reason():
    pe = sparse()
    q, k, v = torch.randn(3, 1, 4, 8, 6, dtype=torch.float64)
    x = torch.randn(1, 8, 24, dtype=torch.float64)
    pos = torch.arange(8)[None]
    with pytest.raises(ValueError, match="reads ctx.x"):
        pl.attention(q, k, v, pe, pos, pos, causal=True)
    with pytest.raises(ValueError, match="x of every key"):
        pl.attention(q[:, :, 2:5], k, v, pe, pos[:, 2:5], pos, causal=True, x=x[:, 2:5])


# ---- golden values from the models' own indexers (transformers 5.24) ----


def tensor(pair):
    flat, shape = pair
    return torch.tensor(
        [float("-inf") if v is None else v for v in flat], dtype=torch.float64
    ).reshape(shape)


def model_scores(row, layout, order, rotary_dim):
    """The indexer's scores from the row's inputs and weights, with the library."""
    w = {k: tensor(v) for k, v in row["weights"].items()}
    x, pos = tensor(row["x"]), torch.tensor(row["positions"])
    h, d = row["n_heads"], row["head_dim"]
    if row["q_resid"] is None:  # Mistral Large 4: queries from LayerNorm(x)
        src = F.layer_norm(
            x, x.shape[-1:], w["q_input_norm.weight"], w["q_input_norm.bias"], 1e-6
        )
    else:
        src = tensor(row["q_resid"])
    b, n, _ = x.shape
    q = (src @ w["wq_b.weight"].T).view(b, n, h, d).transpose(1, 2)  # (b, H, i, d)
    k = F.layer_norm(
        x @ w["wk.weight"].T,
        (d,),
        w["k_norm.weight"],
        w["k_norm.bias"],
        row["k_norm_eps"],
    )
    inv_freq = tensor(row["inv_freq"])
    q, k = (rope_slice(t, pos, inv_freq, layout, rotary_dim, order) for t in (q, k))
    weights = x @ w["weights_proj.weight"].T / math.sqrt(h)  # (b, i, H)
    return indexer_scores(q, k, weights)


DSA_ROWS = GOLDEN["dsa"]


@pytest.mark.parametrize(
    "row", DSA_ROWS, ids=[f"{r['model']}-rope{r['use_rope']}" for r in DSA_ROWS]
)
def test_the_table_layouts_give_the_models_own_scores_and_selection(row):
    spec = SPECS[row["model"]]
    assert row["attention_scaling"] == 1.0  # cos, sin unscaled in these configs
    r = row["rope_dim"] if row["use_rope"] else 0
    ours = model_scores(row, spec.layout, spec.slice_order, r)
    theirs = tensor(row["scores"])  # -inf where the causal mask hides a key
    seen = torch.isfinite(theirs)
    scale = theirs[seen].abs().max()
    assert_close(ours[seen], theirs[seen], atol=1e-5 * scale, rtol=0)
    # the selection: the model's top-k indices among the keys a query sees
    pos = torch.tensor(row["positions"])[None]
    chosen = top_k_mask(ours, row["top_k"], seen, pos)
    compared = 0
    for b, rows in enumerate(row["indices"]):
        for i, idx in enumerate(rows):
            visible = theirs[b, i][seen[b, i]].sort(descending=True).values
            k = row["top_k"]
            if len(visible) > k and visible[k - 1] - visible[k] < 1e-6 * scale:
                continue  # a tie at the boundary: either key is right
            theirs_set = {j for j in idx if seen[b, i, j]}
            assert set(chosen[b, i].nonzero().flatten().tolist()) == theirs_set
            compared += 1
    assert compared >= 0.8 * len(row["indices"]) * len(row["indices"][0])
    if r:  # the other layout, or the other slice order, gives other scores
        for layout, order in [
            (OTHER[spec.layout], spec.slice_order),
            (
                spec.layout,
                "rot_first" if spec.slice_order == "rot_last" else "rot_last",
            ),
        ]:
            wrong = model_scores(row, layout, order, r)
            assert (wrong[seen] - theirs[seen]).abs().max() > 1e-2 * scale


def test_mistral_large_4_rotates_its_indexer_only_in_rope_layers():
    rows = [r for r in DSA_ROWS if r["model"] == "Mistral Large 4"]
    assert sorted(r["use_rope"] for r in rows) == [False, True]
    nope = next(r for r in rows if not r["use_rope"])
    pos = torch.tensor(nope["positions"])
    theirs = tensor(nope["scores"])
    seen = torch.isfinite(theirs)
    shifted = dict(nope, positions=(pos + 100).tolist())
    for case in (nope, shifted):  # with no rotation the positions do not matter
        ours = model_scores(case, "interleaved", "rot_first", 0)
        assert_close(
            ours[seen], theirs[seen], atol=1e-5 * theirs[seen].abs().max(), rtol=0
        )


ROTATIONS = {r["model"]: r for r in GOLDEN["rotations"]}


def check_call(call, x, pos, inv_freq, layout, order, r):
    ours = rope_slice(x, pos, inv_freq, layout, r, order)
    assert_close(ours, tensor(call["out"][0]).reshape(x.shape), atol=1e-6, rtol=1e-6)


def test_minimax_m3_rotates_its_indexer_half_first_with_the_main_frequencies():
    row, spec = ROTATIONS["MiniMax M3"], SPECS["MiniMax M3"]
    (call,) = row["calls"]
    q, k = (tensor(a) for a in call["args"][:2])  # (b, H, n, d), (b, 1, n, d)
    pos, inv_freq = torch.tensor(row["positions"]), tensor(row["inv_freq"])
    r = tensor(call["args"][2]).shape[-1]
    assert r == row["rope_dim"] < row["head_dim"]
    check_call(call, q, pos, inv_freq, spec.layout, spec.slice_order, r)
    assert_close(
        rope_slice(k, pos, inv_freq, spec.layout, r, spec.slice_order),
        tensor(call["out"][1]),
        atol=1e-6,
        rtol=1e-6,
    )


def test_qwen4_exp_rotates_a_blocks_mean_key_at_the_blocks_first_token():
    row, spec = ROTATIONS["Qwen4-Exp"], SPECS["Qwen4-Exp"]
    queries, blocks = row["calls"]
    pos, inv_freq = torch.tensor(row["positions"]), tensor(row["inv_freq"])
    r = row["rope_dim"]
    q = tensor(queries["args"][0]).transpose(1, 2)  # (b, n, H, d) -> (b, H, n, d)
    out = tensor(queries["out"][0]).transpose(1, 2)
    assert_close(
        rope_slice(q, pos, inv_freq, spec.layout, r, spec.slice_order),
        out,
        atol=1e-6,
        rtol=1e-6,
    )
    keys = tensor(blocks["args"][0])[:, 0]  # (blocks, d), the last query's blocks
    starts = pos[:: row["compress_ratio"]][: keys.shape[0]]  # each block's 1st token
    assert_close(
        rope_slice(keys, starts, inv_freq, spec.layout, r, spec.slice_order),
        tensor(blocks["out"][0])[:, 0],
        atol=1e-6,
        rtol=1e-6,
    )


def test_deepseek_v4_rotates_its_indexer_interleaved_last_with_its_own_base():
    row, spec = ROTATIONS["DeepSeek-V4"], SPECS["DeepSeek-V4"]
    keys, queries = row["calls"]
    r, m = row["rope_dim"], row["compress_rate"]
    inv_freq = tensor(row["inv_freq"])
    assert_close(inv_freq, pl.rope_inv_freq(r, 160000.0)[0], rtol=1e-6, atol=0)
    assert_close(
        tensor(row["main_inv_freq"]), pl.rope_inv_freq(r, 10000.0)[0], rtol=1e-6, atol=0
    )
    pos = torch.tensor(row["positions"])
    k = tensor(keys["args"][0])  # (b, 1, windows, d): one key per window of m
    starts = torch.arange(k.shape[2]) * m  # each compressed key at its block's start
    check_call(keys, k, starts, inv_freq, spec.layout, spec.slice_order, r)
    q = tensor(queries["args"][0])  # (b, H, n, d)
    check_call(queries, q, pos, inv_freq, spec.layout, spec.slice_order, r)


def test_glm_5_3_flash_gives_its_indexer_no_positions():
    sigs = GOLDEN["signatures"]
    assert len(sigs) == len(INDEXERS) == 11
    no_pos = [
        c
        for c, params in sigs.items()
        if not {"position_embeddings", "position_ids"} & set(params)
    ]
    assert no_pos == ["Glm5NextTextIndexer"]
    assert SPECS["GLM-5.3-Flash"].layout is None


def test_every_row_of_the_table_is_checked_by_a_golden_case():
    goldens = {r["model"] for r in DSA_ROWS} | set(ROTATIONS)
    for spec in INDEXERS:
        if spec.golden == "signature":
            assert spec.layout is None
        else:
            assert spec.model in goldens, spec.model
    rows = indexer_table()
    assert [r["model"] for r in rows] == [s.model for s in INDEXERS]
    assert all(r["source"].startswith(s.module) for r, s in zip(rows, INDEXERS))


@pytest.mark.parametrize("model", sorted(GOLDEN["main"]))
def test_the_main_attentions_layout_is_the_tables(model):
    """The rotary function each main attention calls, on a probe: which layout (and,
    for a function that rotates a slice itself, which slice) reproduces its output.
    Hugging Face's ``apply_rotary_pos_emb_interleave`` returns the rotated pairs
    de-interleaved (the first coordinates of the pairs, then the second ones): the
    same permutation for q and k, so the scores are those of interleaved RoPE."""
    row, spec = GOLDEN["main"][model], SPECS[model]
    x, out = tensor(row["x"]), tensor(row["out"])
    pos, inv_freq = torch.tensor(row["positions"]), pl.rope_inv_freq(8, 10000.0)[0]
    sliced = x.shape[-1] > 8  # the function picks the slice itself
    outputs = {}
    for layout in ("half", "interleaved"):
        for order in ("rot_first", "rot_last") if sliced else ("rot_first",):
            y = rope_slice(x, pos, inv_freq, layout, 8, order)
            outputs[layout, order if sliced else None] = y
            if not sliced:  # the MLA functions' de-interleaved output
                outputs[layout, "de-interleaved"] = y[..., pl.layout_permutation(8)]
    matches = [key for key, y in outputs.items() if torch.allclose(y, out, atol=1e-6)]
    layout, order, _ = spec.main
    assert len(matches) == 1 and matches[0][0] == layout, matches
    assert matches[0][1] in ((order,) if sliced else (None, "de-interleaved"))
