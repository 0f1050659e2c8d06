#!/usr/bin/python3
"""torchvision's resnet18 (first conv for one channel) on Fashion-MNIST with weft.

    make build
    build/weft run --nproc 2 -- /usr/bin/python3 examples/resnet18_fashion_mnist.py --steps 100
    # alone, in a build tree:
    PYTHONPATH=build/python /usr/bin/python3 examples/resnet18_fashion_mnist.py --steps 20
    # the same loop under PyTorch DDP, for comparison (tools/python_bench.py):
    build/weft run --nproc 2 -- /usr/bin/python3 examples/resnet18_fashion_mnist.py --strategy torch-ddp

Debian packages: python3-torch, python3-torchvision, dataset-fashion-mnist. Each
rank trains on its own shard; rank 0 prints progress and evaluates at the end;
every rank appends weft's metrics JSON lines to --metrics (docs/python.md).
"""

import argparse
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


def wrap(net, opt, args, **options):
    """weft.DataParallel over `net`; or, for --strategy torch-ddp, PyTorch's DDP with
    the attributes this script reads, so that one loop compares the two."""
    if args.strategy != "torch-ddp":
        return weft.DataParallel(net, opt, strategy=args.strategy, bandwidth=args.bandwidth,
                                 compression=args.compression, update=args.update, **options)
    import torch.distributed as dist
    dist.init_process_group("gloo")  # the variables weft run (or torchrun) sets
    model = torch.nn.parallel.DistributedDataParallel(net)
    # --compression: PyTorch's own remedies, as tools/ddp_peer.py registers them.
    if args.compression == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
    elif args.compression.startswith("powersgd:"):
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                            matrix_approximation_rank=int(args.compression.split(":")[1]),
                                            start_powerSGD_iter=2, use_error_feedback=True, warm_start=True)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    elif args.compression != "none":
        raise SystemExit(f"--compression {args.compression}: torch-ddp takes none, fp16 or powersgd:R")
    model.rank, model.workers, model.strategy = dist.get_rank(), dist.get_world_size(), "torch-ddp"
    model.finish = dist.destroy_process_group
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--strategy", default="wfbp", help="a weft strategy, auto, or torch-ddp (PyTorch's DDP)")
    parser.add_argument("--compression", default="none",
                        help="weft's gradient encoding: fp16, bf16, int8, powersgd:R, acpsgd:R; with torch-ddp: "
                             "fp16 or powersgd:R, PyTorch's hooks")
    parser.add_argument("--bandwidth", default="1Gbit", help="the link the planner plans for")
    parser.add_argument("--update", default="auto", help="weft's update mode: auto, ddp, overlap (docs/python.md)")
    parser.add_argument("--batch", type=int, default=32, help="samples per worker per iteration")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--metrics", default="resnet18-metrics.jsonl")
    parser.add_argument("--eval-samples", type=int, default=1000, help="test images rank 0 evaluates at the end (0: none)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = resnet18()
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    model = wrap(net, opt, args)
    metrics = weft.Metrics(args.metrics, model)

    x, y = read("train")
    x, y = x[model.rank::model.workers], y[model.rank::model.workers]  # this rank's shard
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(model.rank))
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
    rank = model.rank
    model.finish()

    if rank == 0 and args.eval_samples > 0:
        tx, ty = read("test")
        net.eval()
        with torch.no_grad():
            out = torch.cat([net(tx[i:i + 250]) for i in range(0, args.eval_samples, 250)])
        accuracy = (out.argmax(1) == ty[:len(out)]).float().mean().item()
        test_loss = F.cross_entropy(out, ty[:len(out)]).item()
        metrics.eval(args.steps - 1, accuracy=accuracy, loss=test_loss)
        print(f"test accuracy {accuracy:.4f}, loss {test_loss:.4f} ({len(out)} images)", flush=True)


if __name__ == "__main__":
    main()
