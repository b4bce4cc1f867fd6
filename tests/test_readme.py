"""The README's Python examples run, in order, as a reader would paste them."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_readme_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(blocks) >= 2, "the README shows the library and its KV cache"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    # the cached step gives what a full forward pass gives at the new token
    import torch

    full = namespace["model"](
        torch.cat([namespace["prompt_tokens"], namespace["next_token"]], 1)
    )
    torch.testing.assert_close(namespace["logits"], full[:, -1:], atol=1e-5, rtol=1e-5)


def test_the_readme_hugging_face_example_keeps_the_logits():
    """The README's posenc_lib.hf example: the model's own RoPE run by posenc_lib gives
    its logits; an encoding swapped in generates."""
    import pytest

    pytest.importorskip("transformers")
    import torch

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    torch.testing.assert_close(
        namespace["after"], namespace["before"], atol=1e-5, rtol=1e-5
    )
    assert namespace["swapped"].shape == (2, 16)
