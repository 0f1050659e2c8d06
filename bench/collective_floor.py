#!/usr/bin/python3
"""What one all-reduce costs on this machine beyond its bytes: P local processes
time, in alternating rounds, a c10d Gloo all-reduce (what weft's runtime and
PyTorch DDP issue) and the same ring done by hand over TCP sockets (2(P-1)
steps, each sending and receiving n/P bytes and, in the first P-1, adding them
in), on loopback, no emulated link. The difference is the price of Gloo's
thread hand-offs on cores the processes share, which the fit of `weft profile
--network` counts in its start-ups.

With --fit NET.json --out FILE, also writes that fit with every timed size
cheaper by what Gloo added to the smallest all-reduce here (no cheaper than
the ring by hand): `weft plan --network FILE` then says what the strategies
would take if a collective cost only its sockets. One amount for every size
keeps the rate at which the fit's large messages move.

Needs Debian's python3-torch (as the PyTorch DDP peer does); run it on an
otherwise idle machine. Example, as BENCHMARKS.md ("What a collective costs
here") ran it:
  /usr/bin/python3 bench/collective_floor.py --processes 4 --rounds 3 \
      --fit results/full-2026-12-03-again/net-100Mbit.json --out /tmp/net-100Mbit-sockets.json
"""
import argparse
import datetime
import json
import math
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import time

SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]  # bytes, as `weft profile --network` starts
BUFFER = 4 << 20  # socket buffers hold a whole step, so every rank may send before it receives


def ring_sockets(rank, world, base_port):
    """A TCP connection to the next rank and one from the previous."""
    listener = socket.create_server(("127.0.0.1", base_port + rank))
    deadline = time.monotonic() + 30
    while True:
        try:
            to_next = socket.create_connection(("127.0.0.1", base_port + (rank + 1) % world))
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                sys.exit(f"rank {rank}: rank {(rank + 1) % world} never listened on port {base_port + (rank + 1) % world}")
            time.sleep(0.01)
    listener.settimeout(30)
    try:
        from_previous, _ = listener.accept()
    except TimeoutError:
        sys.exit(f"rank {rank}: rank {(rank - 1) % world} never connected to port {base_port + rank}")
    listener.close()
    for s in (to_next, from_previous):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)
    return to_next, from_previous


def ring_all_reduce(chunks, rank, world, to_next, from_previous, scratch):
    """Reduce-scatter, then all-gather, over the ring; chunks is a list of world
    numpy float32 arrays, summed in place."""
    for step in range(2 * (world - 1)):
        send = chunks[(rank - step) % world]
        into = chunks[(rank - step - 1) % world]
        to_next.sendall(memoryview(send).cast("B"))
        view = memoryview(scratch[: into.size]).cast("B") if step < world - 1 else memoryview(into).cast("B")
        got = 0
        while got < len(view):
            got += from_previous.recv_into(view[got:])
        if step < world - 1:
            into += scratch[: into.size]


def run_ranks(world):
    """Starts the ranks; the first to fail stops the others. Returns the exit status."""
    children = [subprocess.Popen([sys.executable, *sys.argv], env=os.environ | {"WEFT_FLOOR_RANK": str(r)})
                for r in range(world)]
    try:
        while any(c.poll() is None for c in children):
            if any(c.returncode for c in children):
                break
            time.sleep(0.1)
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.wait()
    return max(c.returncode for c in children)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two ways")
    parser.add_argument("--repeats", type=int, default=100, help="all-reduces per size, way and round")
    parser.add_argument("--port", type=int, default=29640)
    parser.add_argument("--fit", help="a fit from `weft profile --network --out` to make as cheap as the sockets")
    parser.add_argument("--out", help="where --fit's cheaper copy goes")
    args = parser.parse_args()
    if args.processes < 2:
        sys.exit(f"--processes {args.processes}: a ring needs 2 or more")
    if bool(args.fit) != bool(args.out):
        sys.exit("--fit and --out go together: the fit to read and where its cheaper copy goes")
    if "WEFT_FLOOR_RANK" not in os.environ:
        sys.exit(run_ranks(args.processes))

    try:
        import numpy
        import torch
        import torch.distributed as dist
    except ImportError as e:
        sys.exit(f"{e}: install Debian's python3-torch and run this with /usr/bin/python3")

    rank, world = int(os.environ["WEFT_FLOOR_RANK"]), args.processes
    torch.set_num_threads(1)
    to_next, from_previous = ring_sockets(rank, world, args.port + 1)
    store = dist.TCPStore("127.0.0.1", args.port, world, rank == 0, timeout=datetime.timedelta(seconds=60))
    options = dist.ProcessGroupGloo._Options()
    options._timeout = datetime.timedelta(seconds=60)
    options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
    options._threads = 2  # as weft's runtime (kRuntimeCollectiveThreads) and c10d's default
    gloo = dist.ProcessGroupGloo(store, rank, world, options)
    scratch = numpy.empty(max(SIZES) // 4 // world + 1, dtype=numpy.float32)

    def by_hand(size, fill=0.0):  # zeros: sums repeated in place stay finite
        chunks = numpy.array_split(numpy.full(size // 4, fill, dtype=numpy.float32), world)
        return lambda: ring_all_reduce(chunks, rank, world, to_next, from_previous, scratch), chunks

    def by_gloo(size, fill=0.0):
        tensor = torch.full((size // 4,), fill)
        return lambda: gloo.allreduce([tensor]).wait(), [tensor.numpy()]

    for make in (by_hand, by_gloo):  # both sum: every rank's ones add up to world
        once, parts = make(max(SIZES), fill=1.0)
        once()
        if any((part != world).any() for part in parts):
            sys.exit(f"rank {rank}: {make.__name__} summed wrong")

    times = {}  # (way, size) -> seconds, every round's
    for _ in range(args.rounds):
        for way, make in (("socket ring", by_hand), ("c10d Gloo", by_gloo)):
            for size in SIZES:
                once, _ = make(size)
                for _ in range(5):
                    once()
                gloo.barrier().wait()
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    once()
                    times.setdefault((way, size), []).append(time.perf_counter() - start)
    if rank == 0:
        print(f"{world} processes on {os.cpu_count()} cores, median of {args.rounds} x {args.repeats} all-reduces "
              f"(rank 0's), ms")
        print(f"{'bytes':>8} {'socket ring':>12} {'c10d Gloo':>10} {'Gloo / ring':>12}")
        for size in SIZES:
            ring, gloo_s = (statistics.median(times[way, size]) for way in ("socket ring", "c10d Gloo"))
            print(f"{size:>8} {1e3 * ring:>12.3f} {1e3 * gloo_s:>10.3f} {gloo_s / ring:>11.1f}x")
        if args.fit:
            medians = {key: statistics.median(values) for key, values in times.items()}
            write_cheaper_fit(args.fit, args.out, medians)


def write_cheaper_fit(fit_file, out_file, medians):
    """Each point of the fit less Gloo's extra on the smallest all-reduce, never
    below the ring by hand at the nearest size timed here."""
    fit = json.loads(pathlib.Path(fit_file).read_text())
    extra = medians["c10d Gloo", SIZES[0]] - medians["socket ring", SIZES[0]]
    for point in fit.get("points", []):
        nearest = min(SIZES, key=lambda s: abs(math.log(s / point["bytes"])))
        for key in ("seconds", "allreduce_s", "allgather_s"):
            if key in point:
                point[key] = max(point[key] - extra, medians["socket ring", nearest])
    pathlib.Path(out_file).write_text(json.dumps(fit, indent=1))
    print(f"{fit_file}, each point {1e3 * extra:.3f} ms cheaper: {out_file}")


if __name__ == "__main__":
    main()
