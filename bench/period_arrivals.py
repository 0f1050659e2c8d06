#!/usr/bin/env python3
"""When the ranks of a local-SGD run reach each average, from its metrics
(`weft train --metrics`, one JSON line per rank and iteration).

With period H the average ends iteration k·H. For each period it prints, in ms
from the moment the last rank left the previous average: the first, mean and
last rank's arrival at the next one (the end of its last iteration's compute),
how far apart the ranks left the previous one, and the mean rank's compute over
the period; then each rank's median compute by position in the period. The
symmetric simulator has every worker leave an average together, compute H
iterations at the profile's time and arrive `skew` + `drift`·(compute apart)
after that (Note [Skew], src/sim/simulator.cc).

Example: bench/period_arrivals.py results/demo-flsgd-period/runs/100Mbit-flsgd.jsonl --period 5
"""
import argparse
import collections
import json
import statistics


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("metrics", help="a run's metrics file (JSON lines)")
    parser.add_argument("--period", type=int, default=5, help="H: iterations between averages (default 5)")
    parser.add_argument("--from", dest="first", type=int, default=10, help="first average counted (default 10)")
    args = parser.parse_args()
    if args.period < 1:
        parser.error(f"--period {args.period}: expected an integer >= 1")

    rows = collections.defaultdict(dict)
    with open(args.metrics) as f:
        for line in f:
            r = json.loads(line)
            if "compute_s" in r:
                rows[r["iter"]][r["rank"]] = r
    ms = 1e3
    H = args.period
    by_position = collections.defaultdict(list)
    table = []
    k = (args.first + H - 1) // H * H
    while k + H in rows and len(rows[k + H]) == len(rows[k]):
        left = [r["time_s"] for r in rows[k].values()]
        start = max(left)
        arrivals = [rows[k + H - 1][rank]["time_s"] + rows[k + H][rank]["compute_s"] for rank in rows[k]]
        compute = statistics.mean(sum(rows[i][rank]["compute_s"] for i in range(k + 1, k + H + 1)) for rank in rows[k])
        table.append((min(arrivals) - start, statistics.mean(arrivals) - start, max(arrivals) - start,
                      start - min(left), compute))
        for i in range(k + 1, k + H + 1):
            for r in rows[i].values():
                by_position[i % H].append(r["compute_s"])
        k += H
    if not table:
        raise SystemExit(f"{args.metrics}: no whole period of {H} iterations from iteration {args.first}")
    print(f"{'period':>8} {'first':>8} {'mean':>8} {'last':>8} {'left apart':>11} {'compute':>8}   (ms)")
    for n, row in enumerate(table):
        print(f"{n:>8} " + " ".join(f"{ms * x:>8.1f}" for x in row[:3]) + f" {ms * row[3]:>11.1f} {ms * row[4]:>8.1f}")
    medians = [statistics.median(row[i] for row in table) for i in range(5)]
    print(f"{'median':>8} " + " ".join(f"{ms * x:>8.1f}" for x in medians[:3]) +
          f" {ms * medians[3]:>11.1f} {ms * medians[4]:>8.1f}")
    print("compute by position in the period (iteration mod H, the average's last):",
          ", ".join(f"{p}: {ms * statistics.median(v):.1f}" for p, v in sorted(by_position.items())))


if __name__ == "__main__":
    main()
