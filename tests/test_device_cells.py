"""The cells the student run injects first (tools/testing/device_cells.py): the notebook
runs on a GPU (the fake one here), and its figures are drawn, not encoded, so a figure
whose data is a tensor on the GPU still fails where it would fail on a GPU."""

from __future__ import annotations

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tools.testing.device_cells import FIGURES_CELL, GPU_CELL

ROOT = pathlib.Path(__file__).resolve().parents[1]

CELLS = [
    GPU_CELL.format(root=str(ROOT)),
    FIGURES_CELL,
    "import matplotlib.pyplot as plt, torch\n"
    "assert torch.zeros(1, device='cuda').device.type == 'cuda'",
    # a figure left open at the end of its cell is drawn, then closed
    "line, = plt.plot([0, 1, 2], [0.0, 1.0, 2.0])\n"
    "line.set_ydata(torch.arange(3.0))",  # a CPU tensor, read when drawn
    "assert plt.get_fignums() == []",
    # a line's y data is read only when it is drawn: here, by plt.show()
    "line, = plt.plot([0, 1, 2], [0.0, 1.0, 2.0])\n"
    "line.set_ydata(torch.arange(3.0, device='cuda'))\n"
    "plt.show()",
]


def test_a_figure_of_gpu_tensors_fails_when_shown_and_others_are_drawn():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    client = NotebookClient(nb, timeout=120, kernel_name="python3")
    with pytest.raises(CellExecutionError) as error:
        client.execute()
    assert "plt.show()" in str(error.value)  # the last cell, and only it, failed
    assert "numpy" in str(error.value).lower(), str(error.value)[-800:]
