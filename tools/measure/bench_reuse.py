"""What sharing position terms across layers saves in a training step.

    python -m tools.measure.bench_reuse [--n 512] [--layers 4] [--repeats 5]

A ``TinyTransformer`` (d_model 64, 4 heads) takes training steps (forward, backward,
AdamW) with each encoding whose ``score_bias`` is in its ``reuse`` set, twice: as the
library runs it (the bias built once per forward pass and shared by every layer) and
with ``reuse`` emptied on that instance (built in every layer). Best of interleaved
repeats, one thread; prints the step times and the saving.
"""

from __future__ import annotations

import argparse
import time

import torch

import posenc_lib as pl


def step_time(model, tokens, opt, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--names", nargs="+", default=["t5", "alibi"])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    tokens = torch.randint(
        0, 32, (2, args.n), generator=torch.Generator().manual_seed(0)
    )
    print(f"training step, n = {args.n}, {args.layers} layers (best of {args.repeats})")
    for name in args.names:
        times = {}
        for shared in (True, False, True, False):  # interleaved
            torch.manual_seed(0)
            pe = pl.make_encoding(name, d_model=64, n_heads=4, max_len=args.n)
            if not shared:
                pe.reuse = frozenset()  # this instance builds its bias in every layer
            model = pl.TinyTransformer(32, 64, 4, args.layers, pe=pe)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            step_time(model, tokens, opt, 1)  # warm-up
            t = step_time(model, tokens, opt, args.repeats)
            times[shared] = min(times.get(shared, t), t)
        saving = 1 - times[True] / times[False]
        print(
            f"{name:6s} shared {1e3 * times[True]:7.1f} ms   per layer "
            f"{1e3 * times[False]:7.1f} ms   saves {100 * saving:4.1f} %"
        )


if __name__ == "__main__":
    main()
