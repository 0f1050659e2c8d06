#!/usr/bin/python3
"""A small transformer language model (characters) on a text file, with weft.

    make build
    build/weft run --nproc 2 -- /usr/bin/python3 examples/transformer_lm.py --steps 100
    # alone, in a build tree:
    PYTHONPATH=build/python /usr/bin/python3 examples/transformer_lm.py --steps 20

The text: --text FILE, or Debian's fortunes (apt-get install fortunes). The
output embedding is tied to the input one (one layer, docs/python.md); each rank
samples its own windows; rank 0 prints progress; every rank appends weft's
metrics JSON lines to --metrics.
"""

import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import weft

FORTUNES = "/usr/share/games/fortunes"


def read_text(path):
    if path:
        with open(path, "rb") as f:
            return f.read()
    if not os.path.isdir(FORTUNES):
        sys.exit(f"no text: give --text FILE or install Debian's fortunes (apt-get install fortunes)")
    text = b""
    for name in sorted(os.listdir(FORTUNES)):
        file = os.path.join(FORTUNES, name)
        if os.path.isfile(file) and "." not in name:
            with open(file, "rb") as f:
                text += f.read()
    return text


class LanguageModel(nn.Module):
    def __init__(self, vocabulary=256, width=128, heads=4, depth=2, context=64):
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width)
        self.position = nn.Parameter(torch.zeros(context, width))
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, depth)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocabulary, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), diagonal=1))

    def forward(self, tokens):
        n = tokens.shape[1]
        x = self.embed(tokens) + self.position[:n]
        return self.head(self.norm(self.blocks(x, mask=self.mask[:n, :n])))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--text", help="a text file (default: Debian's fortunes)")
    parser.add_argument("--strategy", default="wfbp", help="a weft strategy, or auto")
    parser.add_argument("--bandwidth", default="1Gbit", help="the link the planner plans for")
    parser.add_argument("--batch", type=int, default=16, help="windows per worker per iteration")
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--metrics", default="lm-metrics.jsonl")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = torch.frombuffer(bytearray(read_text(args.text)), dtype=torch.uint8).long()
    net = LanguageModel(context=args.context)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
    model = weft.DataParallel(net, opt, strategy=args.strategy, bandwidth=args.bandwidth)
    metrics = weft.Metrics(args.metrics, model)

    g = torch.Generator().manual_seed(1000 + model.rank)  # each rank its own windows
    start = time.perf_counter()
    for t in range(args.steps):
        at = torch.randint(0, len(data) - args.context - 1, (args.batch,), generator=g)
        window = torch.stack([data[i:i + args.context + 1] for i in at.tolist()])
        opt.zero_grad()
        logits = model(window[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        schedule.step()
        metrics.step(t, loss)
        if model.rank == 0 and (t % 10 == 0 or t + 1 == args.steps):
            rate = (t + 1) * args.batch * model.workers / (time.perf_counter() - start)
            print(f"iteration {t + 1}/{args.steps}  loss {loss.item():.4f} "
                  f"({loss.item() / math.log(2):.2f} bits/char)  {rate:.0f} windows/s", flush=True)
    model.finish()


if __name__ == "__main__":
    main()
