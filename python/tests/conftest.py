import pytest

import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def alone(monkeypatch):
    """In-process tests train alone: no torchrun variables from the caller's environment."""
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "WEFT_SERVERS"):
        monkeypatch.delenv(name, raising=False)
