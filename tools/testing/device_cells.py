"""The cells injected first into a notebook run on a GPU, as text: importing this
module imports no torch (a process that only writes and runs notebooks, like a student
stage of the test command, need not pay torch's 2 s import).

``FAKE_CUDA_CELL``: every cell below runs on the fake CUDA device of
``tools/testing/fake_cuda.py``. ``GPU_CELL``: on CUDA where the kernel has it, else on
the fake device (the kernel decides: it imports torch in any case).
"""

FAKE_CUDA_CELL = """\
# injected: every cell below runs on the fake CUDA device (tools/testing/fake_cuda.py)
import sys as _sys
_sys.path.insert(0, {root!r})
from tools.testing.fake_cuda import fake_cuda as _fake_cuda
_fake_cuda_on = _fake_cuda()
_fake_cuda_on.__enter__()
"""

GPU_CELL = """\
# injected: every cell below runs on a GPU, the fake CUDA device where there is none
# (tools/testing/fake_cuda.py)
import torch as _torch
if not _torch.cuda.is_available():
    import sys as _sys
    _sys.path.insert(0, {root!r})
    from tools.testing.fake_cuda import fake_cuda as _fake_cuda
    _fake_cuda_on = _fake_cuda()
    _fake_cuda_on.__enter__()
"""

FIGURES_CELL = """\
# injected: each figure is drawn where the site shows it (plt.show(), the end of a
# cell), so every artist reads its data, but not encoded as an image: nothing keeps
# this run's outputs
import matplotlib as _mpl
_mpl.use("agg")
import matplotlib.pyplot as _plt


def _draw_and_close(*_args, **_kwargs):
    for _number in _plt.get_fignums():
        _plt.figure(_number).canvas.draw()
    _plt.close("all")


_plt.show = _draw_and_close
get_ipython().events.register("post_execute", _draw_and_close)
"""
