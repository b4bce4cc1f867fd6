"""Produce tests/golden/alibi_bloom.json from Hugging Face's BLOOM
``build_alibi_tensor``.

Run in a separate environment that has ``transformers`` (the course does not depend
on it):

    python -m venv /tmp/ref && /tmp/ref/bin/pip install torch==2.13.0 transformers
    /tmp/ref/bin/python tests/golden/make_alibi_golden.py

BLOOM's tensor is ``m_h * j`` (key position j counted over the non-padding tokens),
shaped ``(batch * heads, 1, n)``: it differs from ALiBi's ``-m_h (i - j)`` by
``m_h * i``, a constant along each query row, which the softmax ignores.
``tests/test_alibi.py`` maps the two explicitly.
"""

import json
import pathlib

import torch
import transformers
from transformers.models.bloom.modeling_bloom import build_alibi_tensor

HEAD_COUNTS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 32, 40, 48, 64, 96, 112]
# one unpadded row and one left-padded row (BLOOM counts positions over real
# tokens only)
MASK = [[1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1]]


def main() -> None:
    mask = torch.tensor(MASK)
    cases = []
    for n_heads in HEAD_COUNTS:
        alibi = build_alibi_tensor(mask, n_heads, torch.float32)  # (b*h, 1, n)
        alibi = alibi.reshape(len(MASK), n_heads, len(MASK[0]))  # (b, h, n)
        ones = build_alibi_tensor(
            torch.ones(1, 2), n_heads, torch.float32
        )  # position 1: m_h * 1
        cases.append(
            {
                "n_heads": n_heads,
                "slopes": ones.reshape(n_heads, 2)[:, 1].tolist(),
                "alibi": alibi.tolist(),
            }
        )
    out = {
        "source": (
            f"transformers {transformers.__version__}, torch {torch.__version__}: "
            "transformers.models.bloom.modeling_bloom.build_alibi_tensor"
        ),
        "attention_mask": MASK,
        "cases": cases,
    }
    path = pathlib.Path(__file__).with_name("alibi_bloom.json")
    # one line per head count: compact, yet a change shows up in a diff as the head
    # count it touches
    lines = ",\n".join(json.dumps(case) for case in cases)
    head = json.dumps({k: v for k, v in out.items() if k != "cases"})[:-1]
    path.write_text(f'{head}, "cases": [\n{lines}\n]}}\n')
    print(f"wrote {path} ({len(cases)} head counts)")


if __name__ == "__main__":
    main()
