#!/usr/bin/python3
"""A small transformer language model (characters) on a text file, with weft.

    make build
    build/weft run --nproc 2 -- /usr/bin/python3 examples/transformer_lm.py --steps 100 --eval-every 50
    # alone, in a build tree:
    PYTHONPATH=build/python /usr/bin/python3 examples/transformer_lm.py --steps 20
    # the same loop under PyTorch's remedies, for races (tools/python_bench.py race lm):
    build/weft run --nproc 2 -- /usr/bin/python3 examples/transformer_lm.py --strategy torch-ddp --compression fp16
    build/weft run --nproc 2 -- /usr/bin/python3 examples/transformer_lm.py --strategy torch-postlocalsgd --H 4

The text: --text FILE, or Debian's fortunes (apt-get install fortunes); its last 5%
is held out. The output embedding is tied to the input one (one layer,
docs/python.md); AdamW with a cosine schedule; the gradient clipped to --clip by
its global norm, between backward and step (DDP's semantics: the averaged
gradient; local SGD's, as PostLocalSGD's: the local one), so weft is given
update="ddp" unless --update says otherwise (its overlapped update cannot clip).
weft's parameter servers step the optimizer on the servers, where no
clipping reaches: they train unclipped, and rank 0 says so. Each rank
samples its own windows of the first 95%, drawn from (--seed, rank); rank 0 prints
progress and evaluates the parameters the workers agree on (every --eval-every
steps, and at the end): the mean cross-entropy over --eval-samples held-out
windows, the same windows in every run; every rank appends weft's metrics JSON
lines to --metrics. The flags of parallelism are resnet18_fashion_mnist.py's
(add_options).
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resnet18_fashion_mnist import TORCH, add_options, agreed_evaluation, check_options, wrap

FORTUNES = "/usr/share/games/fortunes"


def read_text(path):
    if path:
        with open(path, "rb") as f:
            return f.read()
    if not os.path.isdir(FORTUNES):
        sys.exit("no text: give --text FILE or install Debian's fortunes (apt-get install fortunes)")
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
        nn.init.normal_(self.embed.weight, std=0.02)  # N(0, 1) would give logits of ~sqrt(width), a loss of ~100
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), diagonal=1))

    def forward(self, tokens):
        n = tokens.shape[1]
        x = self.embed(tokens) + self.position[:n]
        return self.head(self.norm(self.blocks(x, mask=self.mask[:n, :n])))


def windows(data, at, context):
    """The windows of context + 1 tokens starting at `at`: inputs [:, :-1], targets [:, 1:]."""
    return torch.stack([data[i:i + context + 1] for i in at.tolist()])


def cross_entropy(net, window):
    logits = net(window[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1))


def held_out(test, context, samples):
    """measure(net) for agreed_evaluation: the mean cross-entropy over `samples` windows of
    the held-out text, drawn once by a fixed generator, and in bits per character."""
    at = torch.randint(0, len(test) - context - 1, (samples,), generator=torch.Generator().manual_seed(1))
    fixed = windows(test, at, context)

    def measure(net):
        loss = sum(cross_entropy(net, fixed[i:i + 64]).item() * len(fixed[i:i + 64])
                   for i in range(0, len(fixed), 64)) / len(fixed)
        return {"loss": loss, "bits_per_char": loss / math.log(2)}
    return measure


def clipping(args, model):
    """--clip, or 0 where weft's strategy steps the optimizer on its servers, past any clipping
    of .grad; rank 0 says so."""
    if args.clip > 0 and args.strategy not in TORCH and weft.strategies()[model.strategy] == "ps":
        if model.rank == 0:
            print(f"--clip {args.clip}: weft's {model.strategy} steps the optimizer on the servers, where no "
                  "clipping reaches; training unclipped", file=sys.stderr, flush=True)
        return 0
    return args.clip


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_options(parser, metrics="lm-metrics.jsonl")
    parser.add_argument("--eval-samples", type=int, default=256, help="held-out windows rank 0 evaluates (0: none)")
    parser.add_argument("--text", help="a text file (default: Debian's fortunes)")
    parser.add_argument("--batch", type=int, default=16, help="windows per worker per iteration")
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--clip", type=float, default=1.0, help="the largest global norm of the gradient (0: no clipping)")
    args = parser.parse_args()
    check_options(parser, args)
    if args.clip < 0:
        parser.error(f"--clip {args.clip}: expected a number >= 0 (0: no clipping)")

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    data = torch.frombuffer(bytearray(read_text(args.text)), dtype=torch.uint8).long()
    cut = len(data) * 95 // 100  # the last 5% held out
    if min(cut, len(data) - cut) <= args.context + 1:
        sys.exit(f"--text: {len(data)} bytes; its 5% held out needs more than --context {args.context} + 1")
    train, test = data[:cut], data[cut:]
    net = LanguageModel(context=args.context)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
    if args.clip > 0 and args.update == "auto" and weft.strategies().get(args.strategy) != "ps":
        args.update = "ddp"  # the loop clips, which weft's overlapped update cannot: plan the update it keeps
    model = wrap(net, opt, args)
    metrics = weft.Metrics(args.metrics, model)
    if model.rank == 0:
        print(f"language model: {sum(p.numel() for p in net.parameters())} parameters, {len(train)} characters "
              f"to train on, {len(test)} held out, strategy {model.strategy}", flush=True)

    evaluation = None
    if args.eval_samples > 0:
        evaluation = agreed_evaluation(model, lambda: LanguageModel(context=args.context),
                                       held_out(test, args.context, args.eval_samples), metrics)
    g = torch.Generator().manual_seed(args.seed * 65536 + model.rank)  # each rank its own windows
    start = time.perf_counter()
    for t in range(args.steps):
        window = windows(train, torch.randint(0, len(train) - args.context - 1, (args.batch,), generator=g),
                         args.context)
        opt.zero_grad()
        loss = cross_entropy(model, window)
        loss.backward()
        if t == 0:
            clip = clipping(args, model)  # strategy="auto" has chosen by now
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
        opt.step()
        schedule.step()
        metrics.step(t, loss)
        if model.rank == 0 and (t % 10 == 0 or t + 1 == args.steps):
            rate = (t + 1) * args.batch * model.workers / (time.perf_counter() - start)
            print(f"iteration {t + 1}/{args.steps}  loss {loss.item():.4f} "
                  f"({loss.item() / math.log(2):.2f} bits/char)  {rate:.0f} windows/s", flush=True)
        if evaluation and args.eval_every > 0 and (t + 1) % args.eval_every == 0 and t + 1 < args.steps:
            evaluation(t)
    if evaluation:
        evaluation(args.steps - 1)
    model.finish()


if __name__ == "__main__":
    main()
