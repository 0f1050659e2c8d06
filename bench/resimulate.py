#!/usr/bin/env python3
"""Re-simulate stored benches: what a change to the model, or to a profile's
fields, does to the predictions of runs already measured.

For every weft run of each bench folder (its bench.json, the
profile-LINK.json and net-LINK.json it measured, and for parameter-server runs
the plan-LINK-ps.json that says their cluster), predicts the run's strategy
with `weft simulate` on the stored profile and fit, as stored and with the
fields --set gives (or --drop removes), and prints both against the measured
iteration time; with --weft-changed, the second by another weft binary, and
--set-both changes a field for both (to compare two binaries on a field old
profiles lack). Ends with each strategy's errors per link, both ways.
Errors are (predicted - measured) / measured. Runs the bench gave explicit
options are left out: `weft simulate` re-tunes the rest as the planner does.

Example, as BENCHMARKS.md ("Pairs timed while the workers wait") ran it:
  bench/resimulate.py --strategy bytescheduler --set waiting_pair_slowdown=0.75 results/*
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
PARAMETER_SERVER = {"ps", "ps-interleaved"}


def parse_setting(text):
    field, sep, value = text.partition("=")
    if not sep or not field:
        raise argparse.ArgumentTypeError(f"{text!r}: expected FIELD=NUMBER, e.g. waiting_pair_slowdown=0.75")
    try:
        return field, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a number") from None


def predict(weft, profile, network, cluster, strategy, workers, scratch):
    path = scratch / "profile.json"
    path.write_text(json.dumps(profile))
    done = subprocess.run([weft, "simulate", "--profile", str(path), "--network", str(network), "-P", str(workers),
                           *cluster, "--strategy", strategy, "--json"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"weft simulate failed for {strategy} on {network}: {done.stderr.strip()}")
    return json.loads(done.stdout)["iteration_s"]


def runs_of(folder, only):
    try:
        bench = json.loads((folder / "bench.json").read_text())
    except (OSError, ValueError) as e:
        print(f"{folder}: skipped, no readable bench.json ({e})", file=sys.stderr)
        return
    for run in bench["runs"]:
        if run.get("kind") != "weft" or run["strategy"] not in ALL_REDUCE | PARAMETER_SERVER or run.get("options"):
            continue
        if only and run["strategy"] not in only:
            continue
        profile = folder / f"profile-{run['link']}.json"
        network = folder / f"net-{run['link']}.json"
        cluster = cluster_flags(folder, run)
        if profile.exists() and network.exists() and cluster is not None:
            yield run, profile, network, cluster


def cluster_flags(folder, run):
    """The flags beyond the fit of the cluster the bench planned `run` for; None
    for a parameter-server run whose bench kept no plan-LINK-ps.json."""
    if run["strategy"] in ALL_REDUCE:
        return []
    plan = folder / f"plan-{run['link']}-ps.json"
    if not plan.exists():
        return None
    plan = json.loads(plan.read_text())
    return ["--arch", "ps", "--servers", str(plan["servers"]), "--bandwidth", str(round(plan["bandwidth_Bps"])),
            "--server-bandwidth", str(round(plan["server_bandwidth_Bps"]))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=pathlib.Path, help="bench folders (their --out)")
    parser.add_argument("--set", dest="settings", action="append", type=parse_setting, default=[],
                        metavar="FIELD=NUMBER", help="a profile field to change; repeatable")
    parser.add_argument("--set-both", dest="common", action="append", type=parse_setting, default=[],
                        metavar="FIELD=NUMBER", help="a profile field to change in both predictions; repeatable")
    parser.add_argument("--drop", action="append", default=[], metavar="FIELD",
                        help="a profile field to remove (as in profiles from before it was measured); repeatable")
    parser.add_argument("--strategy", action="append", default=[], help="only these strategies; repeatable")
    parser.add_argument("--weft", default=str(pathlib.Path(__file__).resolve().parent.parent / "build" / "weft"))
    parser.add_argument("--weft-changed", help="the weft binary for the changed predictions (default: --weft)")
    args = parser.parse_args()
    args.weft_changed = args.weft_changed or args.weft
    for binary in {args.weft, args.weft_changed}:
        if not pathlib.Path(binary).exists():
            sys.exit(f"{binary}: no weft binary; build first (make build) or give --weft")

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        predictions = {}  # the repeats of a run share their profile, fit and strategy
        for folder in args.folders:
            for run, profile_file, network, cluster in runs_of(folder, args.strategy):
                key = (profile_file, run["strategy"])
                if key not in predictions:
                    stored = json.loads(profile_file.read_text()) | dict(args.common)
                    changed = {k: v for k, v in stored.items() if k not in args.drop} | dict(args.settings)
                    workers = run["workers"]
                    predictions[key] = (
                        predict(args.weft, stored, network, cluster, run["strategy"], workers, scratch),
                        predict(args.weft_changed, changed, network, cluster, run["strategy"], workers, scratch))
                before, after = predictions[key]
                measured = run["measured_iteration_s"]
                rows.append((before / measured - 1, after / measured - 1, run["strategy"], run["link"]))
                print(f"{str(folder):40} {run['link']:8} {run['strategy']:14} measured {1e3 * measured:7.1f} ms  "
                      f"as stored {1e3 * before:7.1f} ({100 * rows[-1][0]:+6.1f}%)  "
                      f"changed {1e3 * after:7.1f} ({100 * rows[-1][1]:+6.1f}%)", flush=True)
    if not rows:
        sys.exit("no runs with a stored profile and fit (and for parameter servers, plan) in those folders")
    moved = [(b, a) for b, a, *_ in rows if abs(a - b) > 1e-9]
    print(f"{len(rows)} runs; {len(moved)} predicted differently, "
          f"{sum(abs(a) < abs(b) for b, a in moved)} of them closer to their measurement")
    by_strategy = collections.defaultdict(list)
    for row in rows:
        by_strategy[row[2], row[3]].append(row)
    for (strategy, link), group in sorted(by_strategy.items()):
        print(f"{strategy:14} {link:8} {len(group):3} runs:" + "".join(
            f"  {label} mean {100 * statistics.mean(r[column] for r in group):+5.1f}%, "
            f"{sum(abs(r[column]) <= 0.10 for r in group)} within 10%"
            for label, column in (("as stored", 0), ("changed", 1))))
    for label, column in (("as stored", 0), ("changed", 1)):
        errors = [abs(row[column]) for row in rows]
        print(f"{label}: {sum(e <= 0.10 for e in errors)} of {len(rows)} within 10%, "
              f"median |error| {100 * statistics.median(errors):.1f}%")


if __name__ == "__main__":
    main()
