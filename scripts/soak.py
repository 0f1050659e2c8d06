#!/usr/bin/python3
"""Soak run: does a long `weft train` keep its memory flat?

Runs `weft train --nproc K` for many iterations and samples, every few seconds,
the resident memory (VmRSS) of every worker process (the launcher's children).
Prints one line per sample and, at the end, a table per rank: the RSS just after
the warm-up, at the end, and the growth between them; exits 1 if any rank grew
by more than --max-growth (default 5%).

  scripts/soak.py --weft build/weft --iterations 20000 -- --model cnn --nproc 4 --strategy wfbp

Arguments after `--` go to `weft train` (--steps and --no-progress are added).
Only the standard library; any python3 runs it.
"""
import argparse
import os
import subprocess
import sys
import time


def children(pid):
    """Direct children of `pid`, from /proc (the launcher's worker processes)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return sorted(out)


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weft", default="build/weft", help="the weft binary")
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=0.1,
                        help="fraction of the run's samples before the baseline sample (default 0.1)")
    parser.add_argument("--max-growth", type=float, default=0.05)
    parser.add_argument("train_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.iterations < 1 or args.every <= 0 or not 0 <= args.warmup < 1:
        parser.error("--iterations >= 1, --every > 0 and 0 <= --warmup < 1")
    train_args = [a for a in args.train_args if a != "--"]
    command = [args.weft, "train", *train_args, "--steps", str(args.iterations), "--no-progress"]
    print("running:", " ".join(command), flush=True)
    start = time.monotonic()
    launcher = subprocess.Popen(command)
    samples = []  # (seconds, {worker index: kib})
    try:
        while launcher.poll() is None:
            time.sleep(args.every)
            workers = children(launcher.pid)
            sample = {i: rss_kib(p) for i, p in enumerate(workers)}
            sample = {i: k for i, k in sample.items() if k}
            if sample:
                samples.append((time.monotonic() - start, sample))
                print(f"{samples[-1][0]:8.0f} s  " + "  ".join(f"w{i} {k / 1024:7.1f} MiB" for i, k in sample.items()),
                      flush=True)
    except KeyboardInterrupt:
        launcher.terminate()
        launcher.wait()
        return 130
    if launcher.returncode != 0:
        print(f"weft train exited {launcher.returncode}", file=sys.stderr)
        return 1
    if len(samples) < 3:
        print("too few samples: run longer or sample more often (--every)", file=sys.stderr)
        return 1
    # The last sample may catch workers exiting; drop it.
    samples = samples[:-1]
    base_t, base = samples[int(args.warmup * len(samples))]
    end_t, end = samples[-1]
    worst = 0.0
    print(f"\n{len(samples)} samples over {end_t:.0f} s; baseline at {base_t:.0f} s")
    print("| worker | RSS after warm-up | RSS at the end | growth |")
    print("|---|---:|---:|---:|")
    for i in sorted(base):
        if i not in end:
            continue
        growth = (end[i] - base[i]) / base[i]
        worst = max(worst, growth)
        print(f"| {i} | {base[i] / 1024:.1f} MiB | {end[i] / 1024:.1f} MiB | {100 * growth:+.2f}% |")
    return 0 if worst <= args.max_growth else 1


if __name__ == "__main__":
    sys.exit(main())
