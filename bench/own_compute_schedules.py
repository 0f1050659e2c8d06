#!/usr/bin/env python3
"""Stored benches' predictions on each run's own compute, two ways: the strategy
planned again on the scaled layers (what `weft bench` did before it kept the
run's schedule), and the schedule the run executed, planned on the link's
profile, simulated on them (`weft simulate --schedule`; Note [Predicted on the
run's own compute] in src/bench/bench.h).

For every all-reduce run of each bench folder that kept its own-compute profile
(runs/<link>-<strategy>[.k].own-compute.profile.json), prints both against the
run's measured iteration time, then per link and strategy the mean error, the
median |error| and how many runs the schedule moved. Errors are (predicted -
measured) / measured.

Example, as BENCHMARKS.md ("Own compute on the schedule the run executed") ran it:
  bench/own_compute_schedules.py results/*
"""
import argparse
import collections
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

ALL_REDUCE = {"ssgd", "wfbp", "ddp", "mgwfbp", "bytescheduler", "dcredit", "flsgd", "plsgd", "dreamddp",
              "dreamddp-opt"}


def simulate(weft, args):
    done = subprocess.run([weft, "simulate", "--json", *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"weft simulate {' '.join(args)} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)["iteration_s"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=pathlib.Path, help="bench folders (their --out)")
    parser.add_argument("--weft", default=str(pathlib.Path(__file__).resolve().parent.parent / "build" / "weft"))
    args = parser.parse_args()
    rows = collections.defaultdict(list)  # (link, strategy) -> [(replanned error, as-run error)]
    with tempfile.TemporaryDirectory() as scratch:
        for folder in args.folders:
            try:
                bench = json.loads((folder / "bench.json").read_text())
            except (OSError, ValueError):
                continue
            for run in bench["runs"]:
                strategy, link = run["strategy"], run["link"]
                if run.get("kind") != "weft" or strategy not in ALL_REDUCE or run.get("options"):
                    continue
                profile, network = folder / f"profile-{link}.json", folder / f"net-{link}.json"
                if not profile.exists() or not network.exists():
                    continue
                cluster = ["-P", str(run["workers"]), "--network", str(network)]
                planning = ["--strategy", strategy, "--H", str(bench.get("H", 5))]
                measured_runs = run["measured_iteration_runs_s"]
                schedule = pathlib.Path(scratch) / f"{folder.name}-{link}-{strategy}.json"
                for k, measured in enumerate(measured_runs):
                    suffix = f".{k + 1}" if len(measured_runs) > 1 else ""
                    own = folder / "runs" / f"{link}-{strategy}{suffix}.own-compute.profile.json"
                    if not own.exists():
                        continue
                    if not schedule.exists():
                        simulate(args.weft, ["--profile", str(profile), *cluster, *planning,
                                             "--schedule-out", str(schedule)])
                    replanned = simulate(args.weft, ["--profile", str(own), *cluster, *planning])
                    as_run = simulate(args.weft, ["--profile", str(own), *cluster, "--schedule", str(schedule)])
                    rows[(link, strategy)].append((replanned / measured - 1, as_run / measured - 1))
                    print(f"{str(folder):36} {link:8} {strategy:14} run {k + 1} measured {1e3 * measured:7.1f} ms  "
                          f"replanned {1e3 * replanned:7.1f} ({100 * rows[(link, strategy)][-1][0]:+6.1f}%)  "
                          f"as run {1e3 * as_run:7.1f} ({100 * rows[(link, strategy)][-1][1]:+6.1f}%)", flush=True)
    if not rows:
        sys.exit("no all-reduce run with an own-compute profile in those folders")
    print()
    for (link, strategy), errors in sorted(rows.items()):
        summary = [f"mean {100 * statistics.mean(e[i] for e in errors):+5.1f}% "
                   f"median |error| {100 * statistics.median(abs(e[i]) for e in errors):4.1f}%" for i in (0, 1)]
        moved = sum(abs(a - b) > 1e-9 for a, b in errors)
        print(f"{link:8} {strategy:14} {len(errors):3} runs: replanned {summary[0]} | as run {summary[1]} "
              f"| moved {moved}")
    every = [e for errors in rows.values() for e in errors]
    moved = [(a, b) for a, b in every if abs(a - b) > 1e-9]
    print(f"{len(every)} runs, {len(moved)} moved, {sum(abs(b) < abs(a) for a, b in moved)} of them closer; "
          f"within 10%: replanned {sum(abs(a) <= 0.10 for a, _ in every)}, "
          f"as run {sum(abs(b) <= 0.10 for _, b in every)}")


if __name__ == "__main__":
    main()
