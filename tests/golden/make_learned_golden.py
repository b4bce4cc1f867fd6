"""Golden vectors for tests/test_learned.py from Hugging Face's GPT-2 (a learned
absolute table ``wpe``).

Run in a separate environment that has ``transformers`` (4.46.3 was used) and torch:

    python tests/golden/make_learned_golden.py  # writes tests/golden/learned_gpt2.json

It records GPT-2's input to its first block, ``wte(tokens) + wpe(position_ids)``
(captured as the input of ``model.drop``), with default positions and with explicit,
shifted ``position_ids``, and which exception GPT-2 raises for a position past
``n_positions``.
"""

import json
import pathlib

import torch
import transformers
from transformers import GPT2Config, GPT2Model

torch.manual_seed(0)
config = GPT2Config(vocab_size=11, n_positions=8, n_embd=6, n_layer=1, n_head=2)
model = GPT2Model(config).eval()
captured = []
model.drop.register_forward_hook(
    lambda mod, inp, out: captured.append(inp[0].detach().clone())
)
tokens = torch.randint(11, (2, 5))
shifted = torch.tensor([[3, 4, 5, 6, 7], [0, 2, 4, 6, 7]])
with torch.no_grad():
    model(tokens)  # positions 0..4
    model(tokens, position_ids=shifted)
    try:
        model(tokens, position_ids=shifted + 1)  # 8 is past n_positions = 8
        too_long = "no exception"
    except Exception as err:  # noqa: BLE001 (we record what GPT-2 does)
        too_long = type(err).__name__
path = pathlib.Path(__file__).with_name("learned_gpt2.json")
path.write_text(
    json.dumps(
        {
            "source": (
                f"transformers {transformers.__version__}, GPT2Model: input of "
                "model.drop = wte(tokens) + wpe(position_ids)"
            ),
            "n_positions": config.n_positions,
            "wte": model.wte.weight.tolist(),
            "wpe": model.wpe.weight.tolist(),
            "tokens": tokens.tolist(),
            "position_ids": [None, shifted.tolist()],
            "hidden": [c.tolist() for c in captured],
            "past_n_positions_raises": too_long,
        }
    )
)
print("wrote", path)
