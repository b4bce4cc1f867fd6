"""A short training loop and the evaluation helpers, on the model's own device.

None of them moves a model: put it where it should compute first
(``model.to(device)``, with ``device = pl.book.setup()`` or ``pl.get_device()``), then
every batch they receive, built wherever, is moved to the model's device. A helper
that moved the model to the GPU would leave every tensor the reader builds for it
afterwards on the wrong device.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .utils import as_device, check_positive_int, module_device

__all__ = ["train", "make_optimizer", "train_step", "evaluate", "accuracy", "Batch"]

# A batch: tokens (b, n), targets (b, n) with -100 where ignored, positions (n,) or
# (b, n) or None, and optionally the side inputs: a dict of named tensors, the
# ``inputs=`` of the model's forward (Graphormer's {"spd": (b, n, n), "degree":
# (b, n)}, a Laplacian encoding's {"eigvecs": (b, n, k)}), or None.
Batch = (
    tuple[torch.Tensor, torch.Tensor]
    | tuple[torch.Tensor, torch.Tensor, "torch.Tensor | None"]
    | tuple[
        torch.Tensor,
        torch.Tensor,
        "torch.Tensor | None",
        "Mapping[str, torch.Tensor] | None",
    ]
)


def _model_device(model: torch.nn.Module, device: torch.device | None) -> torch.device:
    """The model's device; ``device``, if given, must be it (the helpers never move a
    model, see the module)."""
    here = module_device(model)
    if device is not None and as_device(device).type != here.type:
        raise ValueError(
            f"device={as_device(device)} but the model is on {here}: move the model "
            f"first (model.to(device)); the helpers compute where the model is and "
            "never move it"
        )
    return here


def _unpack(batch: object) -> tuple:
    """``(tokens, targets, pos, inputs)`` from a batch ``(tokens, targets)``,
    ``(tokens, targets, pos)`` or ``(tokens, targets, pos, inputs)`` (pos and inputs
    None where not given)."""
    if (
        not isinstance(batch, (tuple, list))
        or len(batch) not in (2, 3, 4)
        or not all(isinstance(t, torch.Tensor) for t in batch[:2])
    ):
        raise ValueError(
            "a batch must be (tokens, targets), (tokens, targets, pos) or (tokens, "
            "targets, pos, inputs) with tensors tokens (b, n) and targets (b, n), got "
            f"{type(batch).__name__}"
            + (f" of length {len(batch)}" if isinstance(batch, (tuple, list)) else "")
        )
    tokens, targets, pos, inputs = (*batch, None, None)[:4]
    if inputs is not None and (
        not isinstance(inputs, Mapping)
        or not all(
            isinstance(k, str) and isinstance(t, torch.Tensor)
            for k, t in inputs.items()
        )
    ):
        found = (
            {k: type(t).__name__ for k, t in inputs.items()}
            if isinstance(inputs, Mapping)
            else type(inputs).__name__
        )
        raise TypeError(
            "inputs (a batch's fourth element) must be None or a dict of named "
            f'tensors, the model\'s inputs= (e.g. {{"spd": ...}}), got {found}'
        )
    if (
        targets.is_floating_point()
        or targets.is_complex()
        or targets.dtype == torch.bool
    ):
        raise TypeError(
            f"targets must be an integer tensor of token ids, got {targets.dtype}"
        )
    if targets.shape != tokens.shape:
        raise ValueError(
            f"targets must have tokens' shape {tuple(tokens.shape)} (one target per "
            f"token, -100 where none), got {tuple(targets.shape)}"
        )
    return tokens, targets, pos, inputs


def _scored(targets: torch.Tensor, vocab: int) -> torch.Tensor:
    """The mask of scored targets (``!= -100``), after checking that every other
    target is a token id ``0 .. vocab - 1``: one check for the loss and the accuracy
    (a padding of -1 is neither, and was counted as a wrong prediction by one and
    refused by PyTorch inside the other)."""
    scored = targets != -100
    bad = scored & ((targets < 0) | (targets >= vocab))
    if bad.any():  # one sync
        found = sorted(set(targets[bad].tolist()))
        raise ValueError(
            f"targets must lie in [0, {vocab}) or be -100 (ignored), got "
            f"{', '.join(map(str, found[:5]))}{' ...' if len(found) > 5 else ''}"
        )
    return scored


def _forward(
    model: torch.nn.Module, batch: Batch, device: torch.device, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits ``(b, n, V)`` of a batch and its targets ``(b, n)``, every tensor of
    it (side inputs included) moved to ``device``."""
    tokens, targets, pos, inputs = _unpack(batch)
    pos = None if pos is None else pos.to(device)
    if inputs is None:  # a model without side inputs need not take inputs=
        logits = model(tokens.to(device), pos, causal=causal)  # (b, n, V)
    else:
        inputs = {k: t.to(device) for k, t in inputs.items()}
        logits = model(tokens.to(device), pos, causal=causal, inputs=inputs)
    return logits, targets.to(device)


def _loss(
    model: torch.nn.Module, batch: Batch, device: torch.device, causal: bool
) -> torch.Tensor:
    logits, targets = _forward(model, batch, device, causal)  # (b, n, V), (b, n)
    _scored(targets, logits.shape[-1])
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)


def make_optimizer(
    model: torch.nn.Module, steps: int, lr: float = 3e-3, weight_decay: float = 0.01
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """``train``'s optimizer and schedule for ``steps`` steps: AdamW, a linear warmup
    over 5 % of the steps, then a cosine decay. For a loop of one's own that must
    train exactly as ``train`` does (the lab's command line, which checkpoints between
    steps): ``opt, sched = make_optimizer(...)``, then ``train_step`` per step."""
    check_positive_int(steps, "steps")
    if not 0 < lr < math.inf:  # inf turns every parameter into -inf or NaN
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    if not 0 <= weight_decay < math.inf:
        raise ValueError(
            f"weight_decay must be a finite number >= 0, got {weight_decay!r}"
        )
    params = list(model.parameters())
    # On the CPU torch's default is a loop over the parameters, a dozen calls each;
    # the foreach form (the default on a GPU) computes the same numbers, bit for bit
    # (tests/test_train.py), in a dozen calls in all: 0.6 ms a step instead of 1.0
    # for the lab's two-layer model here.
    on_cpu = all(p.device.type == "cpu" for p in params)
    opt = torch.optim.AdamW(
        params, lr=lr, weight_decay=weight_decay, foreach=True if on_cpu else None
    )
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            min(1.0, (s + 1) / warmup)
            * 0.5
            * (1 + torch.cos(torch.tensor(torch.pi * s / steps)).item())
        ),
    )
    return opt, sched


def train_step(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler,
    batch: Batch,
    device: torch.device,
    causal: bool = True,
    autocast=None,
) -> torch.Tensor:
    """One step of ``train``: the loss of ``batch`` (any form ``train`` takes, moved
    to ``device``), its gradient clipped to norm 1, one step of ``opt`` and ``sched``;
    returns the loss (a 0-d tensor, not synced).
    ``autocast``: a context for the forward pass (``torch.autocast(...)``), or None.
    ``model`` may be wrapped (``DistributedDataParallel``: gradients averaged over the
    processes before the clipping)."""
    if autocast is None:
        loss = _loss(model, batch, device, causal)
    else:
        with autocast:
            loss = _loss(model, batch, device, causal)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss.detach()


def train(
    model: torch.nn.Module,
    batches: Callable[[int], Batch],
    steps: int,
    lr: float = 3e-3,
    weight_decay: float = 0.01,
    causal: bool = True,
    device: torch.device | None = None,
    progress: bool = True,
    desc: str = "training",
) -> list[float]:
    """Train ``model`` with AdamW on ``batches(step)`` for ``steps`` steps; return the
    loss per step (the cross-entropy of the scored targets).

    A batch is ``(tokens, targets)``, ``(tokens, targets, pos)`` or, for an encoding
    with side inputs, ``(tokens, targets, pos, inputs)``: ``pos`` may be None and
    ``inputs`` is the dict of named tensors the model's forward takes as ``inputs=``
    (``{"spd": ..., "degree": ...}`` for Graphormer). The learning rate warms up
    linearly for 5 % of the steps, then decays with a cosine. Each batch, side inputs
    included, is moved to the model's device; ``device``, if given, must be that
    device (the model is never moved). One step is ``train_step``, the optimizer
    ``make_optimizer``.
    """
    opt, sched = make_optimizer(model, steps, lr, weight_decay)
    device = _model_device(model, device)
    model.train()
    losses = []
    bar = tqdm(
        range(steps), desc=desc, disable=not progress, mininterval=1.0, leave=False
    )
    for step in bar:
        loss = train_step(model, opt, sched, batches(step), device, causal)
        losses.append(loss.item())
        if step % 25 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    return losses


def _as_batches(
    batches: Batch | Iterator[Batch] | list[Batch],
) -> Iterator[Batch] | list[Batch]:
    """One batch ``(tokens, targets[, pos[, inputs]])`` or several."""
    if (
        isinstance(batches, tuple)
        and len(batches) in (2, 3, 4)
        and isinstance(batches[0], torch.Tensor)
    ):
        return [batches]
    return batches


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    batches: Batch | Iterator[Batch] | list[Batch],
    causal: bool = True,
    device: torch.device | None = None,
) -> float:
    """Mean cross-entropy (nats per predicted token) of ``model`` over one batch
    or several (each in a form ``train`` takes), each moved to the model's device."""
    batches = _as_batches(batches)
    device = _model_device(model, device)
    model.eval()
    losses = [_loss(model, batch, device, causal).item() for batch in batches]
    if not losses:
        raise ValueError("batches is empty")
    return sum(losses) / len(losses)


@torch.no_grad()
def accuracy(
    model: torch.nn.Module,
    batches: Batch | Iterator[Batch] | list[Batch],
    causal: bool = True,
    device: torch.device | None = None,
) -> float:
    """Fraction of scored targets (those != -100) that the model's most likely token
    gets right over one batch or several (each in a form ``train`` takes, moved to
    the model's device)."""
    device = _model_device(model, device)
    model.eval()
    correct = total = 0
    for batch in _as_batches(batches):
        logits, targets = _forward(model, batch, device, causal)  # (b, n, V), (b, n)
        pred = logits.argmax(-1)  # (b, n)
        scored = _scored(targets, logits.shape[-1])
        correct += int((pred[scored] == targets[scored]).sum())
        total += int(scored.sum())
    if total == 0:
        raise ValueError("batches hold no scored target (every target is -100)")
    return correct / total
