"""The tests' model and data: a conv, a LayerNorm and a linear layer, on random 8x8 images."""

import torch
from torch import nn
import torch.nn.functional as F

STEPS = 8
BATCH = 8  # per worker
LR = 0.1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.norm = nn.LayerNorm([4, 8, 8])
        self.fc = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(self.norm(torch.relu(self.conv(x))).flatten(1))


def make_net(seed=0):
    torch.manual_seed(seed)
    return Net()


def data(workers, steps=STEPS, seed=1):
    """steps batches of workers*BATCH samples: (inputs, targets)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(steps, workers * BATCH, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (steps, workers * BATCH), generator=g)
    return x, y


def shard(x, y, rank):
    return x[:, rank * BATCH:(rank + 1) * BATCH], y[:, rank * BATCH:(rank + 1) * BATCH]


def reference(workers, steps=STEPS):
    """One process, plain torch SGD, on the combined batch of `workers` workers."""
    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    x, y = data(workers, steps)
    for t in range(steps):
        opt.zero_grad()
        F.cross_entropy(net(x[t]), y[t]).backward()
        opt.step()
    return [p.detach().clone() for p in net.parameters()]


def max_difference(a, b):
    return max((p - q).abs().max().item() for p, q in zip(a, b))
