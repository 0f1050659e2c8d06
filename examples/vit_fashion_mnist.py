#!/usr/bin/python3
"""A small vision transformer on Fashion-MNIST with weft (AdamW, linear warm-up).

    make build
    build/weft run --nproc 2 -- /usr/bin/python3 examples/vit_fashion_mnist.py --steps 100 --eval-every 50
    # alone, in a build tree:
    PYTHONPATH=build/python /usr/bin/python3 examples/vit_fashion_mnist.py --steps 20
    # the same loop under PyTorch's remedies, for races (tools/python_bench.py race vit):
    build/weft run --nproc 2 -- /usr/bin/python3 examples/vit_fashion_mnist.py --strategy torch-ddp --compression powersgd:2
    build/weft run --nproc 2 -- /usr/bin/python3 examples/vit_fashion_mnist.py --strategy torch-postlocalsgd --H 4

The model a user would write in plain torch: 4x4 patches embedded by a strided
conv, a class token and a position embedding as parameters of the root module,
three pre-norm blocks (LayerNorm, nn.MultiheadAttention, a 4x MLP), a LayerNorm
and a linear head: about 240k parameters in 19 weft layers. AdamW, its learning
rate rising linearly over --warmup-steps, then constant. Debian packages:
python3-torch, python3-torchvision, dataset-fashion-mnist. Each rank trains on its
own shard in an order drawn from (--seed, rank); rank 0 prints progress and
evaluates (every --eval-every steps on the parameters the workers agree on, and at
the end); every rank appends weft's metrics JSON lines to --metrics
(docs/python.md). The flags of parallelism are resnet18_fashion_mnist.py's
(add_options).
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
from resnet18_fashion_mnist import add_options, agreed_evaluation, check_options, classify, data_order, read, wrap


class Block(nn.Module):
    """Pre-norm transformer block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, width, heads, mlp):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(width)
        self.fc1, self.fc2 = nn.Linear(width, mlp * width), nn.Linear(mlp * width, width)

    def forward(self, x):
        y = self.norm1(x)
        x = x + self.attention(y, y, y, need_weights=False)[0]
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class VisionTransformer(nn.Module):
    def __init__(self, image=28, patch=4, width=80, heads=4, depth=3, mlp=4, classes=10):
        super().__init__()
        self.embed = nn.Conv2d(1, width, patch, stride=patch)  # one token per patch
        tokens = (image // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.zeros(1, 1, width))
        self.position = nn.Parameter(torch.randn(1, tokens, width) * 0.02)
        self.blocks = nn.Sequential(*[Block(width, heads, mlp) for _ in range(depth)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)  # (batch, patches, width)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], dim=1) + self.position
        return self.head(self.norm(self.blocks(x))[:, 0])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_options(parser, metrics="vit-metrics.jsonl")
    parser.add_argument("--eval-samples", type=int, default=1000, help="test images rank 0 evaluates (0: none)")
    parser.add_argument("--batch", type=int, default=32, help="samples per worker per iteration")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=1e-3, help="AdamW's learning rate after the warm-up")
    parser.add_argument("--warmup-steps", type=int, default=50, help="steps over which the learning rate rises linearly")
    args = parser.parse_args()
    check_options(parser, args)
    if args.warmup_steps < 0:
        parser.error(f"--warmup-steps {args.warmup_steps}: expected an integer >= 0")

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    net = VisionTransformer()
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=0.05)
    warmup = max(1, args.warmup_steps)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: min(1.0, (t + 1) / warmup))
    model = wrap(net, opt, args)
    metrics = weft.Metrics(args.metrics, model)
    if model.rank == 0:
        print(f"vision transformer: {sum(p.numel() for p in net.parameters())} parameters, "
              f"strategy {model.strategy}", flush=True)

    x, y = read("train")
    x, y = x[model.rank::model.workers], y[model.rank::model.workers]  # this rank's shard
    order = data_order(len(x), args.seed, model.rank)
    evaluation = None
    if args.eval_samples > 0:
        evaluation = agreed_evaluation(model, VisionTransformer, classify(*read("test"), args.eval_samples), metrics)
    start = time.perf_counter()
    for t in range(args.steps):
        batch = order[(t * args.batch) % len(x):][:args.batch]
        opt.zero_grad()
        loss = F.cross_entropy(model(x[batch]), y[batch])
        loss.backward()
        opt.step()
        schedule.step()
        metrics.step(t, loss)
        if model.rank == 0 and (t % 10 == 0 or t + 1 == args.steps):
            rate = (t + 1) * args.batch * model.workers / (time.perf_counter() - start)
            print(f"iteration {t + 1}/{args.steps}  loss {loss.item():.4f}  {rate:.0f} samples/s", flush=True)
        if evaluation and args.eval_every > 0 and (t + 1) % args.eval_every == 0 and t + 1 < args.steps:
            evaluation(t)
    if evaluation:
        evaluation(args.steps - 1)
    model.finish()


if __name__ == "__main__":
    main()
