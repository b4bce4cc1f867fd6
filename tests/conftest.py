import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_and_threads():
    """Every test starts from the same seed, single-threaded (stable on 2-core
    machines)."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    yield
