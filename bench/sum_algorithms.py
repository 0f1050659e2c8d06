#!/usr/bin/env python3
"""Ring all-reduce against all-gather (then a local sum) over Gloo, size by size.

The measurement behind Note [Small all-reduces by all-gather]
(src/runtime/process_group.h), made with PyTorch's own Gloo bindings so that it
does not depend on weft:

    /usr/bin/python3 bench/sum_algorithms.py --nproc 4         # loopback
    sudo build/weft netem --workers 4 --bandwidth 100Mbit -- \\
        /usr/bin/python3 bench/sum_algorithms.py               # one process per namespace

Rank 0 prints, per size, the median time of each algorithm over --repeats
back-to-back calls (after --warmup), both timed in the same job.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="704,4096,16384,58112,230912", help="message sizes in bytes, comma-separated")
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--nproc", type=int, default=0, help="start this many local processes (loopback)")
    p.add_argument("--port", type=int, default=29631)
    return p.parse_args()


def launch(args):
    """Starts --nproc copies of this script on loopback and waits for them."""
    children = []
    for rank in range(args.nproc):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port), RANK=str(rank),
                   WORLD_SIZE=str(args.nproc), GLOO_SOCKET_IFNAME="lo")
        argv = [sys.executable, __file__, "--sizes", args.sizes, "--repeats", str(args.repeats),
                "--warmup", str(args.warmup)]
        children.append(subprocess.Popen(argv, env=env))
    return max(child.wait() for child in children)


def interface_towards(address):
    """The interface this host uses to reach `address` (Gloo binds it)."""
    route = subprocess.run(["ip", "-o", "route", "get", address], capture_output=True, text=True, check=True)
    return route.stdout.split(" dev ")[1].split()[0]


def measure(args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", interface_towards(os.environ["MASTER_ADDR"]))
    dist.init_process_group("gloo")
    world = dist.get_world_size()

    def timed(call):
        times = []
        dist.barrier()
        for i in range(args.warmup + args.repeats):
            start = time.perf_counter()
            call()
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
        return statistics.median(times)

    if dist.get_rank() == 0:
        print(f"{world} processes, median of {args.repeats}")
        print(f"{'bytes':>10} {'all-reduce':>12} {'all-gather':>12}")
    for size in (int(s) for s in args.sizes.split(",")):
        buffer = torch.ones(max(1, size // 4))
        rows = [torch.empty_like(buffer) for _ in range(world)]

        def gather_and_sum():
            dist.all_gather(rows, buffer)
            torch.stack(rows).sum(0)

        ring = timed(lambda: dist.all_reduce(buffer))
        gather = timed(gather_and_sum)
        if dist.get_rank() == 0:
            print(f"{size:>10} {ring * 1e3:>10.2f}ms {gather * 1e3:>10.2f}ms", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    arguments = parse_args()
    sys.exit(launch(arguments) if arguments.nproc and "RANK" not in os.environ else measure(arguments))
