"""``pl.train``'s optimizer on the CPU: AdamW's foreach form, which trains exactly as
torch's default there (a loop over the parameters)."""

from __future__ import annotations

import pytest
import torch

import posenc_lib as pl
from posenc_lib.train import make_optimizer


def _trained(name: str, foreach: bool | None) -> tuple[list[float], list[torch.Tensor]]:
    pl.seed_everything(0)
    pe = pl.make_encoding(name, d_model=32, n_heads=4, max_len=64)
    model = pl.TinyTransformer(16, 32, 4, 2, pe=pe)
    g = torch.Generator().manual_seed(0)

    def batches(step):
        tokens = torch.randint(0, 16, (8, 32), generator=g)
        return tokens, tokens.roll(1, -1)

    real = torch.optim.AdamW
    if foreach is False:  # torch's own default on the CPU

        def real_default(params, **kw):
            return real(params, **{**kw, "foreach": None})

        torch.optim.AdamW = real_default
    try:
        losses = pl.train(model, batches, 20, lr=3e-3, progress=False)
    finally:
        torch.optim.AdamW = real
    return losses, [p.detach() for p in model.parameters()]


def test_the_cpu_optimizer_is_the_foreach_form():
    model = pl.TinyTransformer(16, 32, 4, 1, pe="rope")
    opt, _ = make_optimizer(model, 10)
    assert opt.param_groups[0]["foreach"] is True
    assert torch.optim.AdamW(model.parameters()).param_groups[0]["foreach"] is None


@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "shaw", "cope", "fox"])
def test_it_trains_bit_for_bit_as_the_default_loop(name):
    losses, params = _trained(name, foreach=None)
    default_losses, default_params = _trained(name, foreach=False)
    assert losses == default_losses
    for a, b in zip(params, default_params):
        assert torch.equal(a, b)
