"""The length-extrapolation lab harness: data, protocol, determinism, undefined
lengths, errors."""

import math

import matplotlib
import pytest
import torch

import posenc_lib as pl
from posenc_lib import lab

matplotlib.use("Agg")

TINY = dict(
    train_len=4,
    factors=(1, 2, 4),
    steps=6,
    batch_size=4,
    d_model=16,
    n_heads=2,
    eval_sequences=3,
)
CPU = torch.device("cpu")


def test_config_defaults_and_lengths():
    cfg = lab.LabConfig()
    assert cfg.lengths == (16, 32, 64, 128)
    assert lab.LabConfig(train_len=32, factors=(1, 3)).lengths == (32, 96)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(dataset="wiki"), "dataset must be one of 'markov', 'stdlib', 'text'"),
        (dict(steps=0), "steps must be > 0"),
        (dict(train_len=1), "train_len must be >= 2"),
        (dict(factors=(2, 4)), "include 1"),
        (dict(factors=(1, 4, 2)), "increasing"),
        (dict(factors=(1, 2.5)), "ints >= 1"),
        (dict(factors=()), "non-empty"),
        (dict(lr=0.0), "lr must be a finite number > 0"),
        (dict(d_model=30, n_heads=4), "divisible by n_heads"),
    ],
)
def test_bad_configs_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        lab.LabConfig(**kwargs)


@pytest.mark.parametrize("dataset", ["markov", "stdlib"])
def test_data_shapes_and_seeding(dataset):
    cfg = lab.LabConfig(dataset=dataset, corpus_chars=20_000, **TINY)
    a, b, c = (
        lab.make_lab_data(cfg, 0),
        lab.make_lab_data(cfg, 0),
        lab.make_lab_data(cfg, 1),
    )
    assert a.train.shape == (cfg.steps * cfg.batch_size, cfg.train_len + 1)
    assert a.eval.shape == (cfg.eval_sequences, max(cfg.lengths) + 1)
    assert torch.equal(a.train, b.train) and not torch.equal(
        a.train, c.train
    )  # training data follows the seed
    assert torch.equal(a.eval, c.eval)  # the evaluation set does not
    assert int(a.train.max()) < a.vocab_size and int(a.eval.min()) >= 0
    tokens, targets, pos = a.batches(cfg.batch_size)(1)
    assert (
        torch.equal(tokens[:, 1:], targets[:, :-1]) and pos is None
    )  # targets are the next tokens
    assert (a.floor is None) == (dataset == "stdlib")


def test_every_length_scores_the_same_tokens():
    """Windows of n tokens cut from the same long sequences: w * n = B * max(n) tokens
    at every n."""
    cfg = lab.LabConfig(**TINY)
    data = lab.make_lab_data(cfg, 0)
    model = pl.TinyTransformer(data.vocab_size, 16, 2, 1)
    for n in cfg.lengths:
        ce = lab._token_losses(model, data.eval, n, CPU)
        assert ce.shape == (cfg.eval_sequences * max(cfg.lengths) // n, n)
    # with no positional information and windows of one token, every window sees
    # only itself
    nope = lab._token_losses(model, data.eval, 1, CPU).flatten()
    logits = model(data.eval[:, :-1].reshape(-1, 1))[:, 0]
    expected = torch.nn.functional.cross_entropy(
        logits, data.eval[:, 1:].reshape(-1), reduction="none"
    )
    torch.testing.assert_close(nope, expected.detach())


def test_run_encoding_reports_in_and_past_losses():
    cfg = lab.LabConfig(**TINY)
    res = lab.run_encoding("alibi", cfg, lab.make_lab_data(cfg, 0), seed=0, device=CPU)
    assert res.lengths == (4, 8, 16) and res.train_len == 4 and res.undefined == ""
    assert set(res.loss_past) == {8, 16} and set(res.loss_mean) == {4, 8, 16}
    assert len(res.per_position) == 16
    assert all(
        0 < v < 10 for v in (res.loss_in, *res.loss_past.values(), res.train_loss)
    )
    assert res.rise(16) == pytest.approx(res.loss_past[16] - res.loss_in)


def test_learned_table_is_undefined_past_the_training_length():
    cfg = lab.LabConfig(**TINY)
    res = lab.run_encoding("learned", cfg, lab.make_lab_data(cfg, 0), device=CPU)
    assert math.isfinite(res.loss_in)
    assert all(math.isnan(res.loss_past[n]) for n in (8, 16)) and res.undefined
    assert "n/a" in lab.format_table([res])


def test_runs_are_deterministic_and_summaries_average_seeds():
    cfg = lab.LabConfig(**TINY)
    first = lab.run_lab(
        ["nope", "sinusoidal"], cfg, seeds=(0, 1), device=CPU, verbose=False
    )
    again = lab.run_lab(
        ["nope", "sinusoidal"], cfg, seeds=(0, 1), device=CPU, verbose=False
    )
    assert [r.loss_past for r in first] == [r.loss_past for r in again]
    summary = lab.summarize(first)
    rows = [r for r in first if r.encoding == "nope"]
    assert summary["nope"][16] == pytest.approx(
        (rows[0].rise(16) + rows[1].rise(16)) / 2
    )
    table = lab.format_table(first)
    assert "nope" in table and "sinusoidal" in table and "[0, 1]" in table
    ax = lab.plot_lab(first, floor=0.5)
    assert len(ax.lines) == 2 + 2  # two encodings, the floor and the L marker


def test_unknown_names_and_empty_lists_are_clear_errors():
    cfg = lab.LabConfig(**TINY)
    with pytest.raises(KeyError, match="unknown encoding 'nope2'"):
        lab.run_encoding("nope2", cfg, lab.make_lab_data(cfg, 0))
    with pytest.raises(ValueError, match="at least one encoding"):
        lab.run_lab([], cfg)
    with pytest.raises(ValueError, match="at least one seed"):
        lab.run_lab(["nope"], cfg, seeds=())


def test_every_registered_encoding_runs_in_the_harness():
    cfg = lab.LabConfig(**{**TINY, "steps": 2})
    data = lab.make_lab_data(cfg, 0)
    names = lab.sequence_encodings()
    assert {"nope", "rope", "alibi", "t5"} <= set(names)
    for name in names:
        res = lab.run_encoding(name, cfg, data, device=CPU)
        assert math.isfinite(res.loss_in), name
        assert res.undefined or all(math.isfinite(v) for v in res.loss_past.values()), (
            name
        )


def test_describe_is_generated_from_the_config():
    cfg = lab.LabConfig(train_len=24, steps=77, d_model=48, n_heads=6, n_layers=3)
    text = cfg.describe()
    for fragment in ("L = 24", "77 steps", "d_model 48", "6 heads", "3 layer(s)"):
        assert fragment in text, fragment
    floor = pl.MarkovSource(8, 2, 0, cfg.markov_temperature).loss_floor
    assert f"{floor:.3f} nats/token" in text
    assert "standard library" in lab.LabConfig(dataset="stdlib").describe()


def test_the_chapters_train_a_declared_list_of_runnable_encodings():
    """LAB_ENCODINGS is declared, not read from the registry: a newly registered
    encoding is runnable (sequence_encodings) but trained by no chapter until it is
    added; every declared name is registered and runnable."""
    declared = lab.LAB_ENCODINGS
    assert list(declared) == sorted(set(declared))
    assert set(declared) <= set(lab.sequence_encodings())
    assert {"nope", "rope", "alibi", "sinusoidal", "t5", "learned"} <= set(declared)
    assert not {"lerope", "inkling_bias", "wall", "ddrope", "fope"} & set(declared)


def _rope_model(cfg, scaling=None, **params):
    torch.manual_seed(0)
    pe = pl.Rotary(cfg.d_model // cfg.n_heads, scaling=scaling, **params)
    return pl.TinyTransformer(8, cfg.d_model, cfg.n_heads, 2, pe=pe).eval()


@pytest.mark.parametrize(
    "scaling, params",
    [
        ("linear", dict(factor=4)),
        ("ntk", dict(factor=2)),
        ("yarn", dict(factor=4, original_max_position_embeddings=4)),
    ],
)
def test_rope_rescaled_is_the_same_weights_with_the_scaled_table(scaling, params):
    cfg = lab.LabConfig(**TINY)
    model = _rope_model(cfg)
    want = _rope_model(cfg, scaling, **params)  # same seed: the same weights
    got = lab.rope_rescaled(model, scaling, **params)
    tokens = torch.randint(0, 8, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(got(tokens), want(tokens))
        assert not torch.allclose(model(tokens), got(tokens))  # the original kept
    assert got.blocks[1].attn.pe is got.pe  # still one table for every layer


def test_drop_rope_is_the_same_weights_without_any_position():
    """cos = 1, sin = 0 (SakanaAI/DroPE's NoPEAttention) is NoPE with RoPE's
    weights."""
    cfg = lab.LabConfig(**TINY)
    model = _rope_model(cfg)
    nope = pl.TinyTransformer(8, cfg.d_model, cfg.n_heads, 2, pe=None).eval()
    nope.load_state_dict(model.state_dict())  # RoPE keeps no persistent state
    dropped = lab.drop_rope(model)
    tokens = torch.randint(0, 8, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(dropped(tokens), nope(tokens))
        assert not torch.allclose(model(tokens), dropped(tokens))


def test_rescaling_refuses_a_model_without_plain_rope():
    cfg = lab.LabConfig(**TINY)
    alibi = pl.TinyTransformer(8, cfg.d_model, cfg.n_heads, 1, pe="alibi")
    with pytest.raises(TypeError, match="plain RoPE"):
        lab.drop_rope(alibi)
    with pytest.raises(ValueError, match="unscaled"):
        lab.rope_rescaled(_rope_model(cfg, "linear", factor=2), "ntk", factor=2)
    with pytest.raises(ValueError, match="factor must be"):
        lab.rope_rescaled(_rope_model(cfg), "linear", factor=0.5)


@pytest.mark.parametrize("dataset", ["markov", "stdlib"])
def test_recalibration_batches_are_seeded_and_apart_from_training(dataset):
    cfg = lab.LabConfig(dataset=dataset, corpus_chars=20_000, **TINY)
    data = lab.make_lab_data(cfg, 0)
    a, b = (lab.recalibration_batches(cfg, 0, 3) for _ in range(2))
    c = lab.recalibration_batches(cfg, 1, 3)
    x, y, pos = a(2)
    assert x.shape == (cfg.batch_size, cfg.train_len) and pos is None
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal(x, b(2)[0]) and not torch.equal(x, c(2)[0])
    assert not torch.equal(x, data.batches(cfg.batch_size)(2)[0])
    with pytest.raises(ValueError, match="steps must be > 0"):
        lab.recalibration_batches(cfg, 0, 0)


def test_run_drope_reports_every_method_with_its_budget():
    cfg = lab.LabConfig(**{**TINY, "n_layers": 2})
    data = lab.make_lab_data(cfg, 0)
    results = lab.run_drope(cfg, data, seed=0, recal_steps=2, device=CPU)
    names = [r.encoding for r in results]
    assert names == [
        "rope", "rope+PI", "rope+NTK", "rope+YaRN", "nope", "dropped", "DroPE",
        "rope+more",
    ]  # fmt: skip
    by = {r.encoding: r for r in results}
    rope = lab.run_encoding("rope", cfg, data, seed=0, device=CPU)
    # the lab's RoPE model; the scalings change nothing at L
    for name in ("rope", "rope+PI", "rope+NTK", "rope+YaRN"):
        assert abs(by[name].loss_in - rope.loss_in) < 1e-6, name
    assert abs(by["rope"].rise(16) - rope.rise(16)) < 1e-6
    assert by["rope+PI"].rise(16) != by["rope"].rise(16)
    assert all(r.budget for r in results)
    assert "2 more at L" in by["DroPE"].budget and "dropped" in by["DroPE"].budget
    assert "budget" in lab.format_table(results)
    again = lab.run_drope(cfg, data, seed=0, recal_steps=2, device=CPU)
    assert [r.loss_past for r in again] == [r.loss_past for r in results]
    with pytest.raises(ValueError, match="recal_steps must be > 0"):
        lab.run_drope(cfg, data, recal_steps=0)


def test_evaluate_reads_a_model_per_length():
    cfg = lab.LabConfig(**TINY)
    data = lab.make_lab_data(cfg, 0)
    model, _ = lab.train_at_length("rope", cfg, data, device=CPU)
    direct = lab.evaluate("rope", model, cfg, data, device=CPU)
    per_length = lab.evaluate("rope", {n: model for n in cfg.lengths}.get, cfg, data)
    assert direct.loss_past == per_length.loss_past
    assert direct.loss_in == lab.run_encoding("rope", cfg, data, device=CPU).loss_in
