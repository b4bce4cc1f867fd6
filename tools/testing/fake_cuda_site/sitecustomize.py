"""Every Python process started with this folder on ``PYTHONPATH`` and
``POSENC_FAKE_CUDA=1`` runs on the fake CUDA device (``tools/testing/fake_cuda.py``)
from its first line: the rehearsal of the GPU run on a machine without a card
(``make test-gpu FAKE_CUDA=1``), whose nbval kernels, tests and benchmarks are each a
process of their own. Python imports the first ``sitecustomize`` on its path: this one
stands in for any other while the folder is on ``PYTHONPATH``."""

import os

if os.environ.get("POSENC_FAKE_CUDA") == "1":
    from tools.testing.fake_cuda import fake_cuda

    _fake_cuda_on = fake_cuda()
    _fake_cuda_on.__enter__()  # for the life of the process
