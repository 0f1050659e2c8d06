#!/usr/bin/env python3
"""How far apart the ranks reach and leave each collective in a bench's measured
trace, against the skew its profile measured (Note [Skew], src/sim/simulator.cc).

For each collective every worker recorded (the k-th comm event of an iteration),
from the ranks' issue and end times (one clock since Note [A common time origin],
src/runtime/process_group.h):
  last - mean   how much later than the average rank the last one issued it: what
                the profile's skew_s stands for;
  from waits    the same, computed as the profile computes it, from how long each
                rank waited: mean wait less the least;
  issue spread  first to last issue;
  end spread    first to last rank to see it end;
  after last    from the last issue to the median end.
Medians over the collectives of the steady iterations (from --from). With
--by-message, a table per pattern of message sizes the iterations sent (window
and credit policies form their messages from what is ready, so the patterns
vary), one row per position in it (the k-th collective): its bytes, how long
after the previous collective's median end the last rank issued it (after
prev), and the fitted curve's time for its size and algorithm (net-LINK.json,
as the simulator reads it) beside its after last.

Example: bench/trace_skew.py /tmp/bench-folder
         bench/trace_skew.py --by-message results/full-2026-12-03-wfbp-chain
"""
import argparse
import collections
import json
import pathlib
import statistics


def collectives(trace):
    events = json.loads(trace.read_text())["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e["name"] == "thread_name"}
    found = collections.defaultdict(lambda: collections.defaultdict(list))
    for e in events:
        if e.get("ph") == "X" and threads.get((e["pid"], e["tid"])) == "comm":
            found[e["args"]["iteration"]][e["pid"]].append(
                (e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3, e["args"].get("bytes", 0)))
    for iteration, ranks in sorted(found.items()):
        for k in range(min(len(v) for v in ranks.values())):
            at_k = [ranks[r][k] for r in sorted(ranks)]
            yield iteration, k, [(start, end) for start, end, _ in at_k], at_k[0][2]


def curve_time(fit, size):
    """The measured time of one `size`-byte sum, interpolated between the fit's timed
    sizes (beyond the largest, along the last segment), by the algorithm weft uses
    at that size: all-gather up to gather_below_bytes, ring all-reduce above."""
    key = "allgather_s" if size <= fit.get("gather_below_bytes", 0) else "allreduce_s"
    points = sorted((p["bytes"], p[key]) for p in fit.get("points", []) if p.get(key))
    if len(points) < 2:
        return float("nan")
    for (n0, t0), (n1, t1) in zip(points, points[1:]):
        if size <= n1 or (n1, t1) == points[-1]:
            return t0 + (t1 - t0) * (max(size, points[0][0]) - n0) / (n1 - n0)
    return float("nan")


def by_message(found, folder, link, first):
    """One table per pattern of message sizes the iterations of `found` sent, one
    row per position in it; see the module's docstring."""
    fit_path = folder / f"net-{link}.json"
    fit = json.loads(fit_path.read_text()) if fit_path.exists() else None
    pattern_of = collections.defaultdict(list)  # iteration -> its sizes, in order
    for iteration, k, ranks, size in found:
        pattern_of[iteration].append(size)
    rows = collections.defaultdict(lambda: collections.defaultdict(list))  # (pattern, k) -> columns
    count = collections.Counter()
    previous_end = None
    for iteration, k, ranks, size in found:
        issues = [s for s, _ in ranks]
        end = statistics.median(e for _, e in ranks)
        pattern = tuple(pattern_of[iteration])
        if iteration >= first and len(ranks) >= 2:
            count[pattern] += k == 0
            rows[pattern, k]["last-mean"].append(max(issues) - statistics.mean(issues))
            rows[pattern, k]["after last"].append(end - max(issues))
            if k > 0 and previous_end is not None:
                rows[pattern, k]["after prev"].append(max(issues) - previous_end)
        previous_end = end
    for pattern, n in count.most_common():
        print(f"  {n} iterations sent {' + '.join(str(size) for size in pattern)} bytes")
        print(f"  {'k':>2} {'bytes':>9} {'last-mean':>9} {'after prev':>10} {'after last':>10} {'curve':>7}  (ms)")
        for k, size in enumerate(pattern):
            median = {name: statistics.median(v) if v else float("nan") for name, v in rows[pattern, k].items()}
            curve = f"{curve_time(fit, size) * 1e3:7.2f}" if fit else f"{'-':>7}"
            print(f"  {k:2} {size:9} {median.get('last-mean', float('nan')):9.2f} "
                  f"{median.get('after prev', float('nan')):10.2f} {median.get('after last', float('nan')):10.2f} {curve}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=pathlib.Path, help="bench folders (their --out)")
    parser.add_argument("--from", dest="first", type=int, default=5, help="first steady iteration (default 5)")
    parser.add_argument("--by-message", action="store_true", help="one row per collective of the iteration")
    args = parser.parse_args()
    print(f"{'folder':28} {'link':7} {'strategy':9} {'n':>4} {'profile skew':>12} {'last-mean':>9} "
          f"{'from waits':>10} {'issue spread':>12} {'end spread':>10} {'after last':>10}  (ms)")
    for folder in args.folders:
        bench_path = folder / "bench.json"
        trace = json.loads(bench_path.read_text()).get("traces", {}) if bench_path.exists() else {}
        if not (folder / "trace-measured.json").exists() or not trace:
            print(f"{str(folder):28} no measured trace")
            continue
        link, strategy = trace.get("link", "?"), trace.get("strategy", "?")
        profile_path = folder / f"profile-{link}.json"
        skew = json.loads(profile_path.read_text()).get("skew_s", float("nan")) if profile_path.exists() else float("nan")
        rows = collections.defaultdict(list)
        found = list(collectives(folder / "trace-measured.json"))
        for iteration, _, ranks, _ in found:
            if iteration < args.first or len(ranks) < 2:
                continue
            issues = [s for s, _ in ranks]
            ends = [e for _, e in ranks]
            waits = [e - s for s, e in ranks]
            rows["last-mean"].append(max(issues) - statistics.mean(issues))
            rows["from waits"].append(statistics.mean(waits) - min(waits))
            rows["issue spread"].append(max(issues) - min(issues))
            rows["end spread"].append(max(ends) - min(ends))
            rows["after last"].append(statistics.median(ends) - max(issues))
        if not rows:
            print(f"{str(folder):28} {link:7} {strategy:9} no collective that two ranks recorded")
            continue
        median = {k: statistics.median(v) for k, v in rows.items()}
        print(f"{str(folder):28} {link:7} {strategy:9} {len(rows['last-mean']):4} {skew * 1e3:12.2f} "
              f"{median['last-mean']:9.2f} {median['from waits']:10.2f} {median['issue spread']:12.2f} "
              f"{median['end spread']:10.2f} {median['after last']:10.2f}")
        if args.by_message:
            by_message(found, folder, link, args.first)


if __name__ == "__main__":
    main()
