#!/usr/bin/python3
"""Times the Python package against what a user would otherwise run, side by side
(BENCHMARKS.md, "The Python package"). Debian's /usr/bin/python3 (python3-torch).

    # weft.DataParallel on examples/cnn.py against `weft train --model cnn`, same strategy:
    tools/python_bench.py overhead --weft build/weft --strategies wfbp,ssgd --nproc 4
    # examples/cnn.py under PyTorch DDP and under weft in each update mode, per link
    # (loopback, or emulated: root):
    tools/python_bench.py update --strategies mgwfbp --bandwidths loopback,100Mbit,20Mbit --nproc 4
    # examples/resnet18_fashion_mnist.py with weft's strategies and with PyTorch DDP,
    # each rank behind an emulated link (root):
    tools/python_bench.py resnet18 --weft build/weft --runs torch-ddp,ssgd,wfbp --bandwidths 100Mbit
    # the same for examples/vit_fashion_mnist.py (a small vision transformer, AdamW):
    tools/python_bench.py vit --runs torch-ddp,wfbp,ssgd+powersgd:2 --bandwidths 100Mbit

Runs go in rounds (every run once, then every run again) so that drift on a shared
machine falls on all of them alike. A run's figure is the mean iteration time of
the iterations after --warmup, averaged over the ranks, from the metrics JSON lines
every run writes (docs/formats.md); each round's figure and their median are
printed, and written with the commands to OUT/python-bench.json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
# The examples that `resnet18` and `vit` race: the same flags, torch-ddp or weft.
EXAMPLES = {"resnet18": "resnet18_fashion_mnist.py", "vit": "vit_fashion_mnist.py"}


def mean_iteration(metrics, warmup):
    """Mean iteration_s over iterations >= warmup, averaged over the ranks."""
    by_rank = {}
    with open(metrics) as f:
        for line in f:
            row = json.loads(line)
            if "iteration_s" in row and row["iter"] >= warmup:
                by_rank.setdefault(row["rank"], []).append(row["iteration_s"])
    if not by_rank:
        raise SystemExit(f"{metrics}: no iterations after the first {warmup}")
    return statistics.mean(statistics.mean(v) for v in by_rank.values())


def run(command, log):
    print("  $", " ".join(command), flush=True)
    with open(log, "w") as out:
        status = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT).returncode
    if status != 0:
        raise SystemExit(f"exit {status}: {' '.join(command)} (log: {log})")


def overhead_runs(a):
    """(name, command(metrics)) pairs: weft train and the Python cnn per strategy, and
    the same Python cnn under PyTorch DDP (what the Python model costs by itself)."""
    runs = []
    common = ["--steps", str(a.steps), "--batch", str(a.batch)]
    python = lambda s: lambda m: [a.weft, "run", "--nproc", str(a.nproc), "--", PYTHON,
                                  os.path.join(ROOT, "examples", "cnn.py"), "--strategy", s, "--metrics", m, *common]
    for s in a.strategies.split(","):
        runs.append((f"weft train {s}", lambda m, s=s: [a.weft, "train", "--model", "cnn", "--nproc", str(a.nproc),
                                                         "--strategy", s, "--no-progress", "--metrics", m, *common]))
        runs.append((f"python weft {s}", python(s)))
    runs.append(("python torch-ddp", python("torch-ddp")))
    return [("", runs)]


def update_runs(a):
    """Per link, (name, command(metrics)) pairs: the Python cnn under PyTorch DDP, and
    under weft with each strategy in DDP's semantics and overlapped (docs/python.md)."""
    links = []
    for link in a.bandwidths.split(","):
        shaped = [] if link == "loopback" else ["--bandwidth", link]
        def command(strategy, update, link=link, shaped=shaped):
            return lambda m: [a.weft, "run", "--nproc", str(a.nproc), *shaped, "--", PYTHON,
                              os.path.join(ROOT, "examples", "cnn.py"), "--strategy", strategy, "--update", update,
                              "--bandwidth", "1Gbit" if link == "loopback" else link, "--steps", str(a.steps),
                              "--batch", str(a.batch), "--metrics", m]
        runs = [("torch-ddp", command("torch-ddp", "ddp"))]
        for s in a.strategies.split(","):
            runs += [(f"{s} ddp", command(s, "ddp")), (f"{s} overlap", command(s, "overlap"))]
        links.append((link, runs))
    return links


def example_runs(a):
    """Per link, (name, command(metrics)) pairs: the example EXAMPLES[a.what] under each
    --runs entry (torch-ddp, a weft strategy, or STRATEGY+CODEC for weft with compression)."""
    links = []
    for link in a.bandwidths.split(","):
        runs = []
        for r in a.runs.split(","):
            strategy, _, codec = r.partition("+")
            runs.append((r, lambda m, link=link, strategy=strategy, codec=codec: [
                a.weft, "run", "--nproc", str(a.nproc), "--bandwidth", link, "--", PYTHON,
                os.path.join(ROOT, "examples", EXAMPLES[a.what]), "--strategy", strategy,
                "--compression", codec or "none", "--bandwidth", link, "--steps", str(a.steps),
                "--batch", str(a.batch), "--eval-samples", "0", "--metrics", m]))
        links.append((link, runs))
    return links


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["overhead", "update", *EXAMPLES])
    parser.add_argument("--weft", default=os.path.join(ROOT, "build", "weft"))
    parser.add_argument("--strategies", default="wfbp", help="overhead: weft strategies")
    parser.add_argument("--runs", default="torch-ddp,ssgd,wfbp",
                        help="resnet18, vit: torch-ddp, weft strategies, STRATEGY+CODEC (e.g. wfbp+powersgd:2)")
    parser.add_argument("--bandwidths", default="100Mbit",
                        help="update, resnet18, vit: emulated links (root); update also takes loopback")
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "python-bench"))
    a = parser.parse_args()
    if not a.steps > a.warmup >= 0:
        parser.error(f"--steps {a.steps} --warmup {a.warmup}: expected steps > warmup >= 0")
    if not os.access(a.weft, os.X_OK):
        parser.error(f"--weft {a.weft}: not an executable; build weft first (make build)")
    os.makedirs(a.out, exist_ok=True)

    groups = {"overhead": overhead_runs, "update": update_runs}.get(a.what, example_runs)(a)
    results = []
    for link, runs in groups:
        times = {name: [] for name, _ in runs}
        for r in range(a.rounds):
            for name, command in runs:
                slug = f"{link}-{name}-{r}".strip("-").replace(" ", "-").replace(":", "").replace("+", "-")
                metrics = os.path.join(a.out, slug + ".jsonl")
                run(command(metrics), os.path.join(a.out, slug + ".log"))
                times[name].append(mean_iteration(metrics, a.warmup))
                print(f"{link} {name}: {times[name][-1] * 1e3:.1f} ms", flush=True)
        for name, command in runs:
            results.append({"link": link, "run": name, "mean_iteration_s": times[name],
                            "median_s": statistics.median(times[name]), "command": command("METRICS")})

    base = {}
    print(f"\n| link | run | ms/iteration (median of {a.rounds}) | rounds | vs first |")
    print("|---|---|---:|---|---:|")
    for row in results:
        first = base.setdefault(row["link"], row["median_s"])
        rounds = ", ".join(f"{t * 1e3:.1f}" for t in row["mean_iteration_s"])
        print(f"| {row['link'] or 'loopback'} | {row['run']} | {row['median_s'] * 1e3:.1f} | {rounds} | "
              f"{first / row['median_s']:.2f}× |")
    with open(os.path.join(a.out, "python-bench.json"), "w") as f:
        json.dump({"what": a.what, "argv": sys.argv, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
