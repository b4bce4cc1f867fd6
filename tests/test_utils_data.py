"""Utilities and data sources."""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc_lib as pl
from posenc_lib.train import make_optimizer  # pl.train is the function


def test_check_shape_returns_sizes_and_names_the_axis():
    assert pl.check_shape(torch.zeros(2, 5, 8), "b n D", name="x", D=8) == {
        "b": 2,
        "n": 5,
        "D": 8,
    }
    with pytest.raises(ValueError, match="axis 'D'"):
        pl.check_shape(torch.zeros(2, 5, 8), "b n D", name="x", D=6)
    with pytest.raises(ValueError, match="x must have shape"):
        pl.check_shape(torch.zeros(2, 5), "b n D", name="x")
    with pytest.raises(ValueError, match="axis 'n'"):
        pl.check_shape(torch.zeros(3, 4), "n n")


def test_seed_everything_is_repeatable():
    g1 = pl.seed_everything(3)
    a = torch.randn(4), torch.randn(2, generator=g1)
    g2 = pl.seed_everything(3)
    b = torch.randn(4), torch.randn(2, generator=g2)
    assert_close(a, b)
    with pytest.raises(TypeError, match="seed must be an int"):
        pl.seed_everything(1.5)


def test_markov_source_reaches_its_loss_floor_empirically():
    src = pl.MarkovSource(n_states=4, order=2, seed=0)
    seqs = src.sample(400, 200, torch.Generator().manual_seed(0))
    flat = src.transition.reshape(-1, 4)
    ctx = seqs[:, :-2] * 4 + seqs[:, 1:-1]
    nll = -flat[ctx, seqs[:, 2:]].log().mean().item()
    assert abs(nll - src.loss_floor) < 0.02
    assert 0 < src.loss_floor < math.log(4)


def test_markov_source_is_deterministic():
    a = pl.MarkovSource(seed=1).sample(2, 20, torch.Generator().manual_seed(5))
    b = pl.MarkovSource(seed=1).sample(2, 20, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)


def test_stdlib_corpus_round_trips():
    corpus = pl.stdlib_corpus(20_000)
    assert len(corpus.data) == 20_000 and corpus.vocab_size <= 96
    text = corpus.decode(corpus.data[:200])
    assert torch.equal(corpus.encode(text), corpus.data[:200])
    batch = corpus.batch(3, 16, torch.Generator().manual_seed(0))
    assert batch.shape == (3, 17)
    with pytest.raises(ValueError, match="outside the corpus vocabulary"):
        corpus.encode("\u00e9")


def test_copy_offset_batch_targets_are_the_tokens_k_back():
    tokens, targets, pos = pl.copy_offset_batch(
        2, 10, 3, 7, torch.Generator().manual_seed(0), start=20
    )
    assert (
        torch.equal(targets[:, 3:], tokens[:, :-3]) and (targets[:, :3] == -100).all()
    )
    assert torch.equal(pos, torch.arange(20, 30))
    with pytest.raises(ValueError, match="k \\(10\\) must be smaller than length"):
        pl.copy_offset_batch(2, 10, 10, 7, torch.Generator())


def test_training_reduces_the_loss():
    pl.seed_everything(0)
    src = pl.MarkovSource(n_states=4, order=1, seed=0)
    g = torch.Generator().manual_seed(0)

    def batches(step):
        seq = src.sample(16, 17, g)
        return seq[:, :-1], seq[:, 1:], None

    model = pl.TinyTransformer(4, d_model=16, n_heads=2, n_layers=1)
    losses = pl.train(
        model, batches, steps=60, lr=1e-2, device=torch.device("cpu"), progress=False
    )
    assert sum(losses[-10:]) / 10 < losses[0] - 0.2
    assert pl.evaluate(model, [batches(0)], device=torch.device("cpu")) < losses[0]


def _graph_batches(step):
    """Batches with side inputs: random graphs, the hop count to node 0 as target."""
    g = torch.Generator().manual_seed(step)
    adj = pl.random_connected_graphs(8, 6, 2, g)
    spd = pl.shortest_path_distances(adj)  # (b, n, n)
    tokens = torch.zeros(8, 6, dtype=torch.long)
    tokens[:, 0] = 1
    inputs = {"spd": spd, "degree": pl.node_degrees(adj)}
    return tokens, spd[:, :, 0].clamp(max=4), None, inputs


def _graph_model():
    torch.manual_seed(0)
    return pl.TinyTransformer(5, 16, 2, 1, pe=pl.Graphormer(16, 2, max_dist=4))


def test_training_with_side_inputs_is_the_hand_loop_that_passes_them():
    """A batch (tokens, targets, pos, inputs): ``pl.train`` hands ``inputs`` to the
    model's forward as a hand-written loop does, step for step, bit for bit."""
    model, hand = _graph_model(), _graph_model()
    losses = pl.train(model, _graph_batches, 6, causal=False, progress=False)
    opt, sched = make_optimizer(hand, 6)
    hand_losses = []
    for step in range(6):
        tokens, targets, _, inputs = _graph_batches(step)
        logits = hand(tokens, causal=False, inputs=inputs)
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), targets.flatten()
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hand.parameters(), 1.0)
        opt.step()
        sched.step()
        hand_losses.append(loss.item())
    assert losses == hand_losses
    for p, q in zip(model.parameters(), hand.parameters()):
        assert torch.equal(p, q)
    # evaluate and accuracy read the same batches the same way
    tokens, targets, _, inputs = batch = _graph_batches(9)
    with torch.no_grad():
        logits = model(tokens, causal=False, inputs=inputs)
    want = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    assert pl.evaluate(model, batch, causal=False) == want.item()
    right = (logits.argmax(-1) == targets).float().mean().item()
    assert pl.accuracy(model, [batch], causal=False) == pytest.approx(right)
    # the side inputs matter: with other graphs' distances it computes something else
    other = {**inputs, "spd": inputs["spd"].flip(0)}
    assert (
        pl.evaluate(model, (tokens, targets, None, other), causal=False) != want.item()
    )


@pytest.mark.parametrize(
    "inputs, says",
    [
        ([torch.zeros(1)], "got list"),
        ({"spd": [[0, 1], [1, 0]]}, "got {'spd': 'list'}"),
        ({0: torch.zeros(1)}, "got {0: 'Tensor'}"),
    ],
)
def test_side_inputs_that_are_not_a_dict_of_tensors_are_named(inputs, says):
    model = _graph_model()
    tokens, targets, pos, _ = _graph_batches(0)
    calls = [
        lambda b: pl.train(model, lambda s: b, 1, causal=False, progress=False),
        lambda b: pl.evaluate(model, b, causal=False),
        lambda b: pl.accuracy(model, b, causal=False),
    ]
    for call in calls:
        with pytest.raises(TypeError, match="inputs .* must be None or a dict") as e:
            call((tokens, targets, pos, inputs))
        assert says in str(e.value)


def test_accuracy_counts_only_scored_targets():
    class Oracle(torch.nn.Module):
        """Predicts the token 3 back, i.e. the copy task's answer, except at
        position 5."""

        def forward(self, tokens, pos=None, causal=True):
            out = torch.full((*tokens.shape, 7), -1.0)
            out[:, 3:].scatter_(-1, tokens[:, :-3, None], 1.0)
            out[:, 5] = 0.0
            out[torch.arange(len(tokens)), 5, (tokens[:, 2] + 1) % 7] = (
                1.0  # wrong on purpose at position 5
            )
            return out

    batch = pl.copy_offset_batch(4, 10, 3, 7, torch.Generator().manual_seed(0))
    assert (
        pl.accuracy(Oracle(), batch, device=torch.device("cpu")) == 6 / 7
    )  # 7 scored positions, 1 wrong
    assert pl.accuracy(Oracle(), [batch, batch], device=torch.device("cpu")) == 6 / 7
    with pytest.raises(ValueError, match="no scored target"):
        tokens, targets, pos = batch
        pl.accuracy(
            Oracle(),
            (tokens, torch.full_like(targets, -100), pos),
            device=torch.device("cpu"),
        )
