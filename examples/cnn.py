#!/usr/bin/python3
"""weft train's `cnn` (src/runtime/model/models.cc) written in Python, trained with weft.DataParallel.

    make build
    build/weft run --nproc 4 -- /usr/bin/python3 examples/cnn.py --strategy wfbp --steps 100
    # alone, in a build tree:
    PYTHONPATH=build/python /usr/bin/python3 examples/cnn.py --steps 20

The same layers as `weft train --model cnn` (stem, three residual blocks, pooled
linear head; GroupNorm), the same five weft layers, plain SGD, Fashion-MNIST (or
--synthetic data of its shape): what tools/python_overhead.py times against
`weft train --model cnn`.
"""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import weft

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def conv(cin, cout, kernel, stride):
    return nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)


class Stem(nn.Module):
    def __init__(self, out):
        super().__init__()
        self.conv, self.norm = conv(1, out, 3, 2), nn.GroupNorm(8, out)

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x)))


class ResidualBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.norm1 = conv(cin, cout, 3, stride), nn.GroupNorm(8, cout)
        self.conv2, self.norm2 = conv(cout, cout, 3, 1), nn.GroupNorm(8, cout)
        self.project = None
        if stride != 1 or cin != cout:
            self.project, self.project_norm = conv(cin, cout, 1, stride), nn.GroupNorm(8, cout)

    def forward(self, x):
        y = self.norm2(self.conv2(torch.relu(self.norm1(self.conv1(x)))))
        return torch.relu(y + (self.project_norm(self.project(x)) if self.project is not None else x))


class PoolHead(nn.Module):
    def __init__(self, cin, classes):
        super().__init__()
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(x.mean((2, 3)))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = Stem(16)
        self.block1 = ResidualBlock(16, 32, 2)
        self.block2 = ResidualBlock(32, 32, 1)
        self.block3 = ResidualBlock(32, 64, 2)
        self.head = PoolHead(64, 10)

    def layers(self):
        return [self.stem, self.block1, self.block2, self.block3, self.head]

    def forward(self, x):
        for layer in self.layers():
            x = layer(x)
        return x


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--strategy", default="wfbp", help="a weft strategy, or torch-ddp (PyTorch's DDP)")
    parser.add_argument("--compression", default="none", help="weft's gradient encoding: fp16, bf16, int8, powersgd:R, acpsgd:R")
    parser.add_argument("--bandwidth", default="1Gbit")
    parser.add_argument("--update", default="auto", help="weft's update mode: auto, ddp, overlap (docs/python.md)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--synthetic", action="store_true", help="random data of Fashion-MNIST's shape")
    parser.add_argument("--metrics", default="cnn-metrics.jsonl")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = Cnn()
    opt = torch.optim.SGD(net.parameters(), lr=args.lr)
    from resnet18_fashion_mnist import wrap
    model = wrap(net, opt, args, **({} if args.strategy == "torch-ddp" else {"layers": net.layers()}))
    metrics = weft.Metrics(args.metrics, model)
    if args.synthetic:
        g = torch.Generator().manual_seed(model.rank)
        x, y = torch.randn(4096, 1, 28, 28, generator=g), torch.randint(0, 10, (4096,), generator=g)
    else:
        from resnet18_fashion_mnist import read
        x, y = read("train")
        x, y = x[model.rank::model.workers], y[model.rank::model.workers]
    start = time.perf_counter()
    for t in range(args.steps):
        at = (t * args.batch) % (len(x) - args.batch)
        opt.zero_grad()
        loss = F.cross_entropy(model(x[at:at + args.batch]), y[at:at + args.batch])
        loss.backward()
        opt.step()
        metrics.step(t, loss)
        if model.rank == 0 and (t % 20 == 0 or t + 1 == args.steps):
            rate = (t + 1) * args.batch * model.workers / (time.perf_counter() - start)
            print(f"iteration {t + 1}/{args.steps}  loss {loss.item():.4f}  {rate:.0f} samples/s", flush=True)
    model.finish()


if __name__ == "__main__":
    main()
