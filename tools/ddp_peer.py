#!/usr/bin/python3
"""PyTorch DDP peer for `weft bench`: trains weft's runtime model with stock
torch.nn.parallel.DistributedDataParallel over Gloo, so that weft's strategies can
be compared with what PyTorch itself does on the same link.

Everything but the communication is weft's (src/runtime): the same layers
(models.cc, replicated below; the parameter count is printed and checked with
--expect-parameters), the same Fashion-MNIST files, standardisation and sharding
(data.cc, sharding.cc: the same SplitMix64 permutation per epoch, rank r reads
positions r, r+W, ...), the same batch, learning rate and optimizer, one intra-op
thread per worker. Even the initial values are weft's: PyTorch's default
initialisation after torch.manual_seed(seed) draws the same uniforms from the same
generator in the same order as weft's Note [Deterministic initialisation], so the
peer follows the trajectory of weft's S-SGD strategies (the same test accuracies at
the same iterations, up to float summation order).

Rendezvous is env:// as torchrun sets it: MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE (without them it trains alone). With --nproc K it is its own launcher,
as `weft train --nproc`: it starts K copies of itself on 127.0.0.1, each pinned to
its share of the cores where there is one for each, as weft places its own
(--cores), and supervises
them (Debian's torchrun fails on Python 3.11 in torch.distributed.elastic). Metrics are JSON lines in weft's format
(docs/formats.md §6) with "strategy": "pytorch-ddp":
  {"rank", "iter", "time_s", "iteration_s", "loss", "strategy"}   per iteration, per rank
  {"rank", "iter", "time_s", "eval": {"accuracy", "loss"}}        per evaluation (rank 0)
time_s is seconds since every rank left the start barrier; an iteration ends when
its optimizer step is done.

With --remedy hierarchical:h:H (torch's HierarchicalModelAverager) it needs sites:
run under `weft netem --sites AxB` or `--topology FILE`, which give each rank
WEFT_SITE and WEFT_SITES; the subgroups are those sites.

Needs Debian's python3-torch (run it with /usr/bin/python3) and
dataset-fashion-mnist. Exit status: 0 done, 2 bad usage, 1 failure.
"""

import argparse
import datetime
import gzip
import json
import os
import socket
import struct
import sys
import time

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
# Per-pixel statistics of the training images after scaling to [0, 1] (data.cc).
MEAN, STD = 0.2860, 0.3530
NORM_GROUPS = 8  # GroupNorm groups of the cnn (models.cc kNormGroups)
EVAL_BATCH = 256  # the trainer's evaluation batch
STRATEGY = "pytorch-ddp"
GRACE_S = 30  # --nproc: after a worker failed, how long the others may take to notice


class UsageError(Exception):
    """Bad input: exit status 2."""


# ---------------------------------------------------------------------------
# Sharding: a copy of src/runtime/model/sharding.cc (Note [Sharding] there).

MASK64 = (1 << 64) - 1


class SplitMix64:
    """Steele, Lea & Flood 2014, as sharding.cc; below() is Lemire's multiply-shift."""

    def __init__(self, state):
        self.state = state & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, bound):
        return (self.next() * bound) >> 64


def epoch_permutation(n, seed, epoch):
    perm = list(range(n))
    mixer = SplitMix64(seed)
    rng = SplitMix64(mixer.next() ^ SplitMix64(epoch).next())
    for i in range(n - 1, 0, -1):
        j = rng.below(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def shard_positions(rank, world, batch, step):
    return [rank + world * (step * batch + j) for j in range(batch)]


# ---------------------------------------------------------------------------
# Data


def read_idx(path, magic):
    if not os.path.exists(path):
        raise UsageError(f"Fashion-MNIST not found at {path}; install it with: apt-get install dataset-fashion-mnist")
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = magic & 0xFF
    if len(data) < 4 * (1 + dims) or struct.unpack(">I", data[:4])[0] != magic:
        raise UsageError(f"{path}: not an IDX file of {dims}-dimensional unsigned bytes; reinstall dataset-fashion-mnist")
    shape = struct.unpack(">" + "I" * dims, data[4:4 * (1 + dims)])
    return data[4 * (1 + dims):], shape


def fashion_mnist(torch, directory, split):
    prefix = "train" if split == "train" else "t10k"
    pixels, shape = read_idx(os.path.join(directory, f"{prefix}-images-idx3-ubyte.gz"), 0x00000803)
    labels, _ = read_idx(os.path.join(directory, f"{prefix}-labels-idx1-ubyte.gz"), 0x00000801)
    images = torch.frombuffer(bytearray(pixels), dtype=torch.uint8).reshape(shape[0], 1, shape[1], shape[2])
    targets = torch.frombuffer(bytearray(labels), dtype=torch.uint8).to(torch.int64)
    return images, targets


def standardise(images):
    """uint8 pixels → float32, scaled to [0, 1] and standardised."""
    return (images.float() / 255.0 - MEAN) / STD


class ShardedData:
    """Rank `rank` of `world`'s batches, epoch after epoch (data.cc ShardedSource)."""

    def __init__(self, torch, images, targets, rank, world, batch, seed):
        self.torch, self.images, self.targets = torch, images, targets
        self.rank, self.world, self.batch, self.seed = rank, world, batch, seed
        self.steps = images.shape[0] // (world * batch)
        if self.steps == 0:
            raise UsageError(f"batch {batch} x {world} workers is more than the {images.shape[0]} training examples")
        self.epoch, self.step = -1, self.steps

    def next(self):
        if self.step == self.steps:
            self.epoch += 1
            self.step = 0
            self.permutation = epoch_permutation(self.images.shape[0], self.seed, self.epoch)
        positions = shard_positions(self.rank, self.world, self.batch, self.step)
        self.step += 1
        index = self.torch.tensor([self.permutation[p] for p in positions], dtype=self.torch.int64)
        return standardise(self.images.index_select(0, index)), self.targets.index_select(0, index)


# ---------------------------------------------------------------------------
# Models: src/runtime/model/models.cc, layer for layer.


def build_model(torch, name):
    nn = torch.nn

    def conv(cin, cout, kernel, stride):
        return nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)

    class Stem(nn.Module):
        def __init__(self, out):
            super().__init__()
            self.conv, self.norm = conv(1, out, 3, 2), nn.GroupNorm(NORM_GROUPS, out)

        def forward(self, x):
            return torch.relu(self.norm(self.conv(x)))

    class ResidualBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1, self.norm1 = conv(cin, cout, 3, stride), nn.GroupNorm(NORM_GROUPS, cout)
            self.conv2, self.norm2 = conv(cout, cout, 3, 1), nn.GroupNorm(NORM_GROUPS, cout)
            self.project = self.project_norm = None
            if stride != 1 or cin != cout:
                self.project, self.project_norm = conv(cin, cout, 1, stride), nn.GroupNorm(NORM_GROUPS, cout)

        def forward(self, x):
            y = self.norm2(self.conv2(torch.relu(self.norm1(self.conv1(x)))))
            return torch.relu(y + (self.project_norm(self.project(x)) if self.project is not None else x))

    class PoolHead(nn.Module):
        def __init__(self, cin, classes):
            super().__init__()
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            return self.fc(x.mean(dim=(2, 3)))

    class Dense(nn.Module):
        def __init__(self, cin, cout, flatten, relu):
            super().__init__()
            self.fc, self.flatten, self.relu = nn.Linear(cin, cout), flatten, relu

        def forward(self, x):
            y = self.fc(x.flatten(1) if self.flatten else x)
            return torch.relu(y) if self.relu else y

    if name == "cnn":
        layers = [("stem", Stem(16)), ("block1", ResidualBlock(16, 32, 2)), ("block2", ResidualBlock(32, 32, 1)),
                  ("block3", ResidualBlock(32, 64, 2)), ("head", PoolHead(64, 10))]
    elif name == "mlp":
        layers = [("fc1", Dense(28 * 28, 256, True, True)), ("fc2", Dense(256, 128, False, True)),
                  ("fc3", Dense(128, 10, False, False))]
    else:
        raise UsageError(f"--model {name}: the DDP peer has cnn and mlp (gpt-tiny is not replicated)")
    from collections import OrderedDict
    return nn.Sequential(OrderedDict(layers))


# ---------------------------------------------------------------------------
# The job


def local_interface_towards(address):
    """The name of the interface this host would use to reach `address`, so that
    Gloo listens there (inside `weft netem`'s namespaces hostname resolution points
    elsewhere). Mirrors process_group.cc's local_address_towards."""
    import fcntl
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((socket.gethostbyname(address), 9))  # sends nothing; asks for a route
        local = probe.getsockname()[0]
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:
                continue
            if socket.inet_ntoa(packed[20:24]) == local:
                return name
    finally:
        probe.close()
    return None


class MetricsFile:
    """One write(2) per line on an O_APPEND file: lines of several ranks never interleave."""

    def __init__(self, path, truncate):
        self.fd = None
        if path:
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if truncate else 0)
            self.fd = os.open(path, flags, 0o644)

    def write(self, line):
        if self.fd is not None:
            os.write(self.fd, (json.dumps(line) + "\n").encode())


def evaluate(torch, model, images, targets):
    model.eval()
    correct, loss, n = 0, 0.0, images.shape[0]
    with torch.no_grad():
        for start in range(0, n, EVAL_BATCH):
            x = standardise(images[start:start + EVAL_BATCH])
            y = targets[start:start + EVAL_BATCH]
            out = model(x)
            loss += torch.nn.functional.cross_entropy(out, y).item() * x.shape[0]
            correct += out.argmax(1).eq(y).sum().item()
    model.train()
    return correct / n, loss / n


def parse_remedy(text):
    """("none"|"fp16"|"powersgd"|"postlocalsgd"|"hierarchical", R or H or (h, H) or 0); UsageError naming the
    accepted values."""
    accepted = ("none, fp16, powersgd:R, postlocalsgd:H, hierarchical:H, hierarchical:h:H (R, h, H integers >= 1, "
                "h dividing H and below it)")
    if text in ("none", "fp16"):
        return text, 0
    kind, _, value = text.partition(":")
    if kind in ("powersgd", "postlocalsgd") and value.isdigit() and int(value) >= 1:
        return kind, int(value)
    if kind == "hierarchical":
        parts = value.split(":")
        if 1 <= len(parts) <= 2 and all(p.isdigit() and int(p) >= 1 for p in parts):
            h, H = (1, int(parts[0])) if len(parts) == 1 else (int(parts[0]), int(parts[1]))
            if h < H and H % h == 0:  # torch averages at the largest period dividing the step
                return kind, (h, H)
    raise UsageError(f"--remedy {text}: not a remedy; accepted: {accepted}")


def strategy_name(remedy):
    """The metrics' strategy, as weft bench names the row: pytorch-ddp, or pytorch-ddp+fp16,
    pytorch-ddp+powersgd:2, pytorch-postlocalsgd:8, pytorch-hierarchical:8 (h = 1), pytorch-hierarchical:2:8."""
    if remedy == "none":
        return STRATEGY
    kind, value = parse_remedy(remedy)
    if kind == "hierarchical":
        h, H = value
        return f"pytorch-hierarchical:{H}" if h == 1 else f"pytorch-hierarchical:{h}:{H}"
    if kind == "postlocalsgd":
        return "pytorch-" + remedy
    return STRATEGY + "+" + remedy


def sites_of(torch, dist, world):
    """Each site's ranks, in rank order: every rank's WEFT_SITE (set by weft netem with --sites or --topology),
    gathered. UsageError without them."""
    if "WEFT_SITE" not in os.environ or "WEFT_SITES" not in os.environ:
        raise UsageError("--remedy hierarchical: needs sites; run under `weft netem --sites AxB` or "
                         "`--topology FILE`, which set WEFT_SITE and WEFT_SITES (or weft bench --sites)")
    count = int(os.environ["WEFT_SITES"])
    every = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(every, torch.tensor([int(os.environ["WEFT_SITE"])], dtype=torch.int64))
    sites = [[] for _ in range(count)]
    for rank, site in enumerate(every):
        sites[int(site.item())].append(rank)
    return sites


def hierarchical_averager(torch, dist, world, h, H):
    """torch's HierarchicalModelAverager averaging each site every h iterations and every worker every H.

    Its lower level is a subgroup per site. torch 1.13 builds subgroups with dist.new_subgroups, which refuses
    to run without CUDA ("Subgroups can only be created when CUDA is available") although Gloo groups need none;
    so the peer builds the groups new_subgroups would build, one dist.new_group per site, every rank creating
    every site's group in the same order, and gives the averager its own site's. With --sites AxB the sites are
    exactly new_subgroups(group_size=B)'s blocks of consecutive ranks; a --topology file may group any ranks."""
    from collections import OrderedDict
    from torch.distributed.algorithms.model_averaging import hierarchical_model_averager as hierarchical

    sites = sites_of(torch, dist, world)
    rank = dist.get_rank()
    mine = None
    for site in sites:
        group = dist.new_group(ranks=site)  # collective: every rank, every site, in order
        if rank in site:
            mine = group
    # The top level is the whole world, which torch builds no subgroup for; then its site level.
    averager = hierarchical.HierarchicalModelAverager(OrderedDict([(H, world)]), warmup_steps=0)
    if len(sites) > 1:
        averager._periods = [h, H]  # the largest period dividing the step picks the group (_find_process_group)
        averager.period_process_group_dict = OrderedDict([(h, mine), (H, averager.process_group)])
    return averager


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="cnn")
    p.add_argument("--batch", type=int, default=32, help="samples per worker per iteration")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "momentum", "adam"])
    p.add_argument("--seed", type=int, default=0, help="initialisation and data order")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=0, help="rank 0 evaluates every N iterations and at the end")
    p.add_argument("--target-accuracy", type=float, default=0, help="stop once an evaluation reaches it (0: never)")
    p.add_argument("--metrics", default="", help="append JSON lines here (rank 0 truncates it first)")
    p.add_argument("--expect-parameters", type=int, default=0, help="refuse to train unless the model has this many")
    p.add_argument("--data", default=FASHION_MNIST, help="folder of the gzipped IDX files")
    p.add_argument("--failure-timeout", type=float, default=300, help="seconds a collective may wait for a peer")
    p.add_argument("--nproc", type=int, default=0, help="start this many local workers (default: be one worker)")
    p.add_argument("--port", type=int, default=29500, help="with --nproc: MASTER_PORT of the workers")
    p.add_argument("--cores", default="auto", choices=["auto", "pinned", "shared"],
                   help="with --nproc: where the workers run, as weft's --cores (auto: each pinned to cores of "
                        "its own where there is one for each, else any core)")
    p.add_argument("--remedy", default="none",
                   help="PyTorch's remedy for a slow link: none (plain DDP), fp16 (DDP + fp16_compress_hook), "
                        "powersgd:R (DDP + powerSGD_hook at rank R, error feedback, warm start), "
                        "postlocalsgd:H (PostLocalSGD: no_sync steps, PeriodicModelAverager every H), "
                        "hierarchical:H or hierarchical:h:H (no_sync steps, HierarchicalModelAverager: each site "
                        "every h iterations, default 1, every worker every H; needs WEFT_SITE and WEFT_SITES)")
    a = p.parse_args(argv)
    a.remedy_kind, a.remedy_value = parse_remedy(a.remedy)
    if a.nproc < 0:
        raise UsageError(f"--nproc {a.nproc}: expected an integer >= 1")
    for name, value, low in [("--batch", a.batch, 1), ("--steps", a.steps, 1), ("--eval-every", a.eval_every, 0)]:
        if value < low:
            raise UsageError(f"{name} {value}: expected an integer >= {low}")
    if not a.lr > 0:
        raise UsageError(f"--lr {a.lr}: expected a number > 0")
    return a


def train(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)  # the workers share the machine's cores, as weft's do
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if "GLOO_SOCKET_IFNAME" not in os.environ:
        interface = local_interface_towards(os.environ["MASTER_ADDR"])
        if interface:
            os.environ["GLOO_SOCKET_IFNAME"] = interface
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.failure_timeout))

    torch.manual_seed(args.seed)
    model = build_model(torch, args.model)
    counts = [(name, sum(p.numel() for p in layer.parameters())) for name, layer in model.named_children()]
    total = sum(c for _, c in counts)
    if rank == 0:
        print(f"ddp_peer: {args.model} has {total} parameters in {len(counts)} layers: "
              + ", ".join(f"{n} {c}" for n, c in counts), file=sys.stderr, flush=True)
    if args.expect_parameters and total != args.expect_parameters:
        raise UsageError(f"--expect-parameters {args.expect_parameters}: this replica of weft's {args.model} has "
                         f"{total}; bench/ddp_peer.py no longer matches src/runtime/model/models.cc")
    # PyTorch's defaults (25 MiB buckets, a 1 MiB first bucket), but one bucket under the
    # PowerSGD hook: over Gloo, with several, the ranks issue its P and Q all-reduces in
    # different orders and Gloo aborts (as examples/resnet18_fashion_mnist.py's wrap()).
    cap_mb = 25
    if args.remedy_kind == "powersgd":
        cap_mb = 1 + sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(cap_mb * 2**20)
    ddp = DistributedDataParallel(model, bucket_cap_mb=cap_mb)
    averager = None
    if args.remedy_kind == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
    elif args.remedy_kind == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        # Compressed from the second step (the earliest PowerSGDState allows with error feedback).
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=args.remedy_value,
                                            start_powerSGD_iter=2, use_error_feedback=True, warm_start=True)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    elif args.remedy_kind == "postlocalsgd":
        # PostLocalSGD with no warm-up: every step local (no_sync), parameters averaged every H.
        from torch.distributed.algorithms.model_averaging import averagers
        averager = averagers.PeriodicModelAverager(period=args.remedy_value, warmup_steps=0)
    elif args.remedy_kind == "hierarchical":
        # Hierarchical SGD with no warm-up: every step local (no_sync), sites every h, everyone every H.
        averager = hierarchical_averager(torch, dist, world, *args.remedy_value)
    if args.optimizer == "adam":
        optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
    else:
        optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9 if args.optimizer == "momentum" else 0)

    images, targets = fashion_mnist(torch, args.data, "train")
    data = ShardedData(torch, images, targets, rank, world, args.batch, args.seed)
    test_images, test_targets = fashion_mnist(torch, args.data, "test") if rank == 0 else (None, None)

    metrics = MetricsFile(args.metrics, truncate=True) if rank == 0 else None
    dist.barrier()  # the common time origin, and the metrics file exists
    origin = time.perf_counter()
    if rank != 0:
        metrics = MetricsFile(args.metrics, truncate=False)
    now = lambda: time.perf_counter() - origin
    stop = torch.zeros(1)

    def evaluation(t):
        accuracy, loss = evaluate(torch, model, test_images, test_targets)
        metrics.write({"rank": rank, "iter": t, "time_s": now(), "eval": {"accuracy": accuracy, "loss": loss}})
        print(f"ddp_peer: evaluation after iteration {t}: accuracy {accuracy:.4f}, loss {loss:.4f}",
              file=sys.stderr, flush=True)
        return accuracy

    previous_end, last_progress = now(), -1e9
    for t in range(args.steps):
        x, y = data.next()
        optimizer.zero_grad(set_to_none=True)
        if averager is None:
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
            loss.backward()  # DDP all-reduces the buckets during backward and waits for them
            optimizer.step()
        else:
            with ddp.no_sync():
                loss = torch.nn.functional.cross_entropy(ddp(x), y)
                loss.backward()
            optimizer.step()
            averager.average_parameters(ddp.parameters())
        value = loss.item()
        end = now()
        metrics.write({"rank": rank, "iter": t, "time_s": end, "iteration_s": end - previous_end, "loss": value,
                       "strategy": strategy_name(args.remedy)})
        previous_end = end
        if rank == 0 and end - last_progress >= 5:
            last_progress = end
            print(f"ddp_peer: iteration {t + 1}/{args.steps}  loss {value:.4f}", file=sys.stderr, flush=True)
        if args.eval_every and (t + 1) % args.eval_every == 0 and t + 1 < args.steps:
            if rank == 0:
                stop[0] = 1.0 if evaluation(t) >= args.target_accuracy > 0 else 0.0
            if args.target_accuracy > 0:
                dist.broadcast(stop, src=0)  # everyone learns whether to go on
                if stop[0] > 0:
                    break
    else:
        if rank == 0 and args.eval_every:
            evaluation(args.steps - 1)
    dist.barrier()
    # No destroy_process_group(): in PyTorch 1.13 rank 0 could spin in it forever
    # once the others had exited (seen with fp16_compress_hook behind emulated
    # links). Every rank has passed the barrier and the metrics are written
    # (unbuffered), so the process leaves at once.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def cores_of(cores, process, processes):
    """The cores process `process` of `processes` runs on, as weft places its own
    (Note [Hosts on cores], src/units/cores.h): blocks of cores when they are
    enough, else one core each in turn."""
    c = len(cores)
    if processes > c:
        return [cores[process % c]]
    size, larger = divmod(c, processes)
    first = process * size + min(process, larger)
    return cores[first:first + size + (1 if process < larger else 0)]


def launch(args, argv):
    """Starts args.nproc workers of this script on 127.0.0.1 and waits for them. When
    one fails, the others get GRACE_S to notice, then SIGTERM; SIGINT/SIGTERM to the
    launcher reach every worker. Returns the first failure's exit status, or 0."""
    import ctypes
    import signal
    import subprocess

    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1

    def die_with_launcher(cores):
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if cores:
            os.sched_setaffinity(0, cores)

    usable = sorted(os.sched_getaffinity(0))

    worker_argv = []
    skip = False
    for i, a in enumerate(argv):  # this command line without --nproc
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            worker_argv.append(a)
    workers = []
    for rank in range(args.nproc):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port), RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE=str(args.nproc))
        pinned = args.cores == "pinned" or (args.cores == "auto" and args.nproc <= len(usable))
        cores = cores_of(usable, rank, args.nproc) if pinned else []
        workers.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + worker_argv, env=env,
                                        preexec_fn=lambda cores=cores: die_with_launcher(cores)))
    stopping = []

    def forward(signum, _frame):
        stopping.append(signum)
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    status, failed_at = 0, None
    while any(w.poll() is None for w in workers):
        for rank, w in enumerate(workers):
            if w.returncode not in (None, 0) and status == 0:
                status, failed_at = w.returncode, time.monotonic()
                print(f"ddp_peer: worker {rank} exited with status {w.returncode}", file=sys.stderr, flush=True)
        if failed_at is not None and time.monotonic() - failed_at > GRACE_S:
            forward(signal.SIGTERM, None)
            failed_at = float("inf")
        time.sleep(0.05)
    for w in workers:
        if w.returncode != 0 and status == 0:
            status = w.returncode if w.returncode > 0 else 128 - w.returncode
    if stopping:
        return 128 + stopping[0]
    return status


def main(argv):
    try:
        args = parse_args(argv)
        if args.nproc:
            return launch(args, argv)
        train(args)
        return 0
    except UsageError as e:
        print(f"ddp_peer: error: {e}", file=sys.stderr, flush=True)
        return 2
    except Exception as e:  # a failed peer says which rank and why, and exits non-zero
        print(f"ddp_peer: rank {os.environ.get('RANK', '0')}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
