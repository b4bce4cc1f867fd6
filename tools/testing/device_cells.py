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
