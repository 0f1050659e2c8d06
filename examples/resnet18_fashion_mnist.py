#!/usr/bin/python3
"""torchvision's resnet18 (first conv for one channel) on Fashion-MNIST with weft.

    make build
    build/weft run --nproc 2 -- /usr/bin/python3 examples/resnet18_fashion_mnist.py --steps 100 --eval-every 50
    # alone, in a build tree:
    PYTHONPATH=build/python /usr/bin/python3 examples/resnet18_fashion_mnist.py --steps 20
    # the same loop under PyTorch's remedies, for races (tools/python_bench.py race resnet18):
    build/weft run --nproc 2 -- /usr/bin/python3 examples/resnet18_fashion_mnist.py --strategy torch-ddp --compression fp16
    build/weft run --nproc 2 -- /usr/bin/python3 examples/resnet18_fashion_mnist.py --strategy torch-postlocalsgd --H 4

SGD with momentum, BatchNorm. Debian packages: python3-torch, python3-torchvision,
dataset-fashion-mnist. Each rank trains on its own shard in an order drawn from
(--seed, rank); rank 0 prints progress and evaluates the parameters the workers
agree on (every --eval-every steps, and at the end); every rank appends weft's
metrics JSON lines to --metrics (docs/python.md).

This file also holds what the examples share: the flags (add_options), the
switch between weft and PyTorch's DDP or PostLocalSGD (wrap), the dataset (read)
and the evaluation of the agreed parameters (agreed_evaluation).
"""

import argparse
import functools
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import torchvision

import weft

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's pixel statistics (as weft train's cnn)


def read(split):
    prefix = "train" if split == "train" else "t10k"
    images_file = os.path.join(DATA, f"{prefix}-images-idx3-ubyte.gz")
    if not os.path.exists(images_file):
        sys.exit(f"Fashion-MNIST not found at {DATA}; install it with: apt-get install dataset-fashion-mnist")
    with gzip.open(images_file) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(DATA, f"{prefix}-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(images.copy()).float() / 255 - MEAN) / STD
    return x, torch.from_numpy(labels.astype(np.int64))


def resnet18():
    net = torchvision.models.resnet18(num_classes=10)
    net.conv1 = torch.nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)  # 28x28, one channel
    net.maxpool = torch.nn.Identity()
    return net


TORCH = ("torch-ddp", "torch-postlocalsgd")  # PyTorch's own data parallelism, for races


def add_options(parser, metrics):
    """The flags every example shares: how to train in parallel, the seed, the evaluation."""
    parser.add_argument("--strategy", default="wfbp",
                        help="a weft strategy, auto, torch-ddp (PyTorch's DDP) or torch-postlocalsgd (PyTorch's "
                             "PostLocalSGD: every step local, parameters averaged every --H)")
    parser.add_argument("--compression", default="none",
                        help="weft's gradient encoding: fp16, bf16, int8, powersgd:R, acpsgd:R; with torch-ddp: "
                             "fp16 or powersgd:R, PyTorch's hooks")
    parser.add_argument("--bandwidth", default="1Gbit", help="the link weft's planner plans for")
    parser.add_argument("--host", help="a host description (weft profile --host FILE) weft's planner plans for: how "
                                       "this machine's shared cores slow the messages")
    parser.add_argument("--update", default="auto", help="weft's update mode: auto, ddp, overlap (docs/python.md)")
    parser.add_argument("--H", type=int, help="local SGD's period (weft's default if not given); "
                                              "torch-postlocalsgd: its averaging period (required)")
    parser.add_argument("--outer-optimizer", help="weft's local SGD, EASGD: none or nesterov (weft's default if not given)")
    parser.add_argument("--outer-lr", type=float, help="the outer optimizer's learning rate (weft's default if not given)")
    parser.add_argument("--outer-momentum", type=float, help="the outer optimizer's momentum (weft's default if not given)")
    parser.add_argument("--allow", help="strategy auto: the families it may choose from, comma-separated, and lossy "
                                        "(e.g. ssgd,local_sgd,lossy; weft's default if not given)")
    parser.add_argument("--seed", type=int, default=0, help="the model's initialisation; each rank's data order is "
                                                            "drawn from (seed, rank)")
    parser.add_argument("--metrics", default=metrics, help="weft's metrics JSON lines, every rank appending")
    parser.add_argument("--eval-every", type=int, default=0, help="rank 0 evaluates every N steps (0: only at the end)")
    parser.add_argument("--trace", help="weft's measured timeline of every worker's first 50 steps (Chrome trace JSON, "
                                        "docs/python.md)")


def check_options(parser, args):
    """Usage errors of the shared flags, named as the user spelled them."""
    if args.eval_every < 0 or args.eval_samples < 0:
        parser.error(f"--eval-every {args.eval_every} --eval-samples {args.eval_samples}: expected integers >= 0")
    if args.H is not None and args.H < 1:
        parser.error(f"--H {args.H}: expected an integer >= 1")
    if args.strategy in TORCH:
        given = [f for f in ("outer_optimizer", "outer_lr", "outer_momentum", "allow", "host", "trace")
                 if getattr(args, f) is not None]
        if given:
            parser.error(f"--{given[0].replace('_', '-')}: an option of weft's, not of --strategy {args.strategy}")
    if args.strategy == "torch-ddp" and args.H is not None:
        parser.error("--H: torch-ddp averages every step; PyTorch's local SGD is --strategy torch-postlocalsgd --H H")
    if args.strategy == "torch-postlocalsgd":
        if args.H is None:
            parser.error("--strategy torch-postlocalsgd: needs --H, its averaging period")
        if args.compression != "none":
            parser.error(f"--compression {args.compression}: torch-postlocalsgd sends parameters uncompressed; "
                         "PyTorch's compression hooks are --strategy torch-ddp --compression fp16|powersgd:R")


def data_order(n, seed, rank):
    """A permutation of n samples, its own for every (seed, rank)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 65536 + rank))


def wrap(net, opt, args, **options):
    """weft.DataParallel over `net`, given only the weft options the user gave, so that weft's
    defaults apply to the rest; or, for --strategy torch-ddp or torch-postlocalsgd, PyTorch's
    own, with the attributes the examples read (rank, workers, strategy,
    agreed_state_dict(), finish()), so that one loop races them."""
    if args.strategy not in TORCH:
        for name in ("H", "outer_optimizer", "outer_lr", "outer_momentum"):
            if getattr(args, name, None) is not None:
                options[name] = getattr(args, name)
        if getattr(args, "allow", None) is not None:
            options["allow"] = tuple(args.allow.split(","))
        for name in ("host", "trace"):
            if getattr(args, name, None) is not None:
                options[name] = getattr(args, name)
        return weft.DataParallel(net, opt, strategy=args.strategy, bandwidth=args.bandwidth,
                                 compression=args.compression, update=args.update, **options)
    import torch.distributed as dist
    dist.init_process_group("gloo")  # the variables weft run (or torchrun) sets
    # One bucket for PowerSGD: torch 1.13's hook issues its P and Q all-reduces from future
    # callbacks, and over Gloo, with several buckets, the ranks issued them in different
    # orders (the LM and resnet18 aborted at the first compressed step: "enforce fail at
    # gloo/transport/tcp/pair.cc: op.preamble.length <= op.nbytes").
    # DDP's first bucket has a cap of its own, which torch's DDP says a user may set
    # (tools/ddp_peer.py, weft bench's peer, does the same).
    cap_mb = 25
    if args.compression.startswith("powersgd:"):
        cap_mb = 1 + sum(p.numel() * p.element_size() for p in net.parameters()) / 2**20
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(cap_mb * 2**20)
    model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=cap_mb)
    model.rank, model.workers, model.strategy = dist.get_rank(), dist.get_world_size(), args.strategy
    model.agreed_state_dict = net.state_dict
    # No destroy_process_group(): torch 1.13's may spin for good once a peer has exited
    # (tools/ddp_peer.py); past the barrier every rank is done with the others.
    model.finish = dist.barrier
    # --compression: PyTorch's own remedies, as tools/ddp_peer.py registers them.
    if args.compression == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
        model.strategy += "+fp16"
    elif args.compression.startswith("powersgd:"):
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                            matrix_approximation_rank=int(args.compression.split(":")[1]),
                                            start_powerSGD_iter=2, use_error_feedback=True, warm_start=True)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        model.strategy += "+" + args.compression
    elif args.compression != "none":
        raise SystemExit(f"--compression {args.compression}: torch-ddp takes none, fp16 or powersgd:R")
    if args.strategy == "torch-postlocalsgd":
        # As tools/ddp_peer.py's postlocalsgd:H: every step local (no_sync, for good), and
        # after every optimizer.step() the averager, which averages the parameters every H.
        from torch.distributed.algorithms.model_averaging import averagers
        model.require_backward_grad_sync = False  # what no_sync() sets
        averager = averagers.PeriodicModelAverager(period=args.H, warmup_steps=0)
        step = opt.step

        @functools.wraps(step)  # keeps an lr_scheduler's mark on step
        def step_and_average(*a, **k):
            result = step(*a, **k)
            averager.average_parameters(net.parameters())
            return result

        opt.step = step_and_average
        model.strategy += f":{args.H}"
        model.agreed_state_dict = lambda: averaged_state(net, dist)
    return model


def averaged_state(net, dist):
    """net.state_dict() averaged over the workers, parameters and buffers (integers rounded
    down). Collective: every rank calls it at the same iteration."""
    state, done = net.state_dict(), {}
    for name, value in state.items():  # the same order on every rank
        key = (value.data_ptr(), value.dtype, tuple(value.shape))  # a tied tensor is averaged once
        if key not in done:
            total = value.detach().clone()
            dist.all_reduce(total)
            done[key] = total / dist.get_world_size() if total.is_floating_point() \
                else total // dist.get_world_size()
        state[name] = done[key]
    return state


def agreed_evaluation(model, make, measure, metrics):
    """f(t), for every rank to call at the same iteration t (collective where the workers'
    parameters differ): rank 0 loads the parameters the workers agree on into its own
    make() (a module like the trained one), measures it (measure(module) -> {name: value},
    without gradients, in eval mode) and writes metrics.eval(t, **values)."""
    fresh = make() if model.rank == 0 else None

    def evaluation(t):
        state = model.agreed_state_dict()
        if fresh is None:
            return
        fresh.load_state_dict(state)
        fresh.eval()
        with torch.no_grad():
            values = measure(fresh)
        metrics.eval(t, **values)
        print(f"step {t + 1}: " + ", ".join(f"test {k} {v:.4f}" for k, v in values.items()), flush=True)

    return evaluation


def classify(x, y, samples):
    """measure(net) for agreed_evaluation: accuracy and mean cross-entropy on the first `samples` of (x, y)."""
    def measure(net):
        out = torch.cat([net(x[i:i + 250]) for i in range(0, min(samples, len(x)), 250)])
        target = y[:len(out)]
        return {"accuracy": (out.argmax(1) == target).float().mean().item(),
                "loss": F.cross_entropy(out, target).item()}
    return measure


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_options(parser, metrics="resnet18-metrics.jsonl")
    parser.add_argument("--eval-samples", type=int, default=1000, help="test images rank 0 evaluates (0: none)")
    parser.add_argument("--batch", type=int, default=32, help="samples per worker per iteration")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    check_options(parser, args)

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    net = resnet18()
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    model = wrap(net, opt, args)
    metrics = weft.Metrics(args.metrics, model)

    x, y = read("train")
    x, y = x[model.rank::model.workers], y[model.rank::model.workers]  # this rank's shard
    order = data_order(len(x), args.seed, model.rank)
    evaluation = None
    if args.eval_samples > 0:
        evaluation = agreed_evaluation(model, resnet18, classify(*read("test"), args.eval_samples), metrics)
    start = time.perf_counter()
    for t in range(args.steps):
        batch = order[(t * args.batch) % len(x):][:args.batch]
        opt.zero_grad()
        loss = F.cross_entropy(model(x[batch]), y[batch])
        loss.backward()
        opt.step()
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
