#!/usr/bin/env bash
# Regenerates the planner's figures of BENCHMARKS.md, as Markdown on stdout.
#
#   scripts/figures.sh            # everything below, in BENCHMARKS.md's order
#   scripts/figures.sh tables     # the planner tables only (deterministic: the
#                                 # simulator's predictions, same on any machine)
#   scripts/figures.sh speed      # bench_sim and bench_local_sgd (timings: noisy)
#   scripts/figures.sh traces     # message statistics of a few predicted timelines
#   scripts/figures.sh check      # exit 1 unless BENCHMARKS.md's planner tables
#                                 # equal what plan_tables prints now
#   scripts/figures.sh overhead   # engine overhead on 1 process against a plain
#                                 # LibTorch loop (bench_overhead; not in `all`:
#                                 # it needs the LibTorch build and minutes of CPU)
#   scripts/figures.sh convergence  # test accuracy against wall-clock of wfbp, flsgd
#                                 # and dreamddp, 4 workers, 100Mbit emulated (weft
#                                 # bench --mode accuracy; root, ~15 min; not in `all`)
#
# It configures and builds weft, bench_sim, bench_local_sgd and plan_tables in
# $BUILD (default build-figures, beside the other engineers' build dirs) with
# $JOBS jobs (default 2), without the LibTorch runtime. Timings are reported as
# wall and CPU time with the load average before and after the run: on a shared
# machine CPU time is the figure to read. $BENCH_REPETITIONS (default 3) runs of
# bench_sim are summarised by their median. `overhead` builds bench_overhead in
# $RUNTIME_BUILD (default build-figures-runtime) with the runtime, and passes
# $OVERHEAD_ARGS (default: mlp and cnn, wfbp, 15 repetitions of 40 iterations) to
# it; run it on a quiet machine, the load average is printed with the figures.
# `convergence` builds weft in $RUNTIME_BUILD too, reruns the bench into
# $CONVERGENCE_OUT (default build/convergence: bench.json, accuracy.png, runs,
# logs) and prints its summary; $CONVERGENCE_ARGS replaces the bench's flags.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build-figures}
jobs=${JOBS:-2}
repetitions=${BENCH_REPETITIONS:-3}
runtime_build=${RUNTIME_BUILD:-$root/build-figures-runtime}
overhead_args=${OVERHEAD_ARGS:---models mlp,cnn --strategies wfbp --repetitions 15 --iterations 40}
# 1404 steps: 3 epochs of a worker's 15,000-image shard at batch 32; each run stops
# at 85%. Evaluations every 50 steps, a multiple of H, so flsgd is evaluated just
# after its full average.
convergence_out=${CONVERGENCE_OUT:-$root/build/convergence}
convergence_args=${CONVERGENCE_ARGS:---mode accuracy --model cnn --workers 4 --bandwidths 100Mbit --strategies wfbp,flsgd,dreamddp --no-ddp --H 5 --target-accuracy 0.85 --eval-every 50 --steps 1404 --port 29900}
what=${1:-all}
case $what in
  all | tables | speed | traces | check | overhead | convergence) ;;
  *) echo "usage: $0 [all|tables|speed|traces|check|overhead|convergence]" >&2; exit 2 ;;
esac

if [[ $what == overhead ]]; then
  cmake -S "$root" -B "$runtime_build" -G Ninja -DWEFT_RUNTIME=ON -DWEFT_BENCH=ON >/dev/null
  cmake --build "$runtime_build" -j"$jobs" --target bench_overhead >/dev/null
elif [[ $what == convergence ]]; then
  cmake -S "$root" -B "$runtime_build" -G Ninja -DWEFT_RUNTIME=ON -DWEFT_BENCH=ON >/dev/null
  cmake --build "$runtime_build" -j"$jobs" --target weft >/dev/null
else
  cmake -S "$root" -B "$build" -G Ninja -DWEFT_RUNTIME=OFF -DWEFT_BENCH=ON >/dev/null
  cmake --build "$build" -j"$jobs" --target weft bench_sim bench_local_sgd plan_tables >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

load() { cut -d' ' -f1-3 /proc/loadavg; }

tables() {
  for table in dcredit local-sgd ps; do
    printf '### %s\n\n```sh\nbuild-figures/tools/plan_tables %s\n```\n\n' "$table" "$table"
    "$build/tools/plan_tables" "$table"
    printf '\n'
  done
}

# Google Benchmark's JSON → Markdown: one row per benchmark (the median when
# repeated), wall and CPU time in the benchmark's unit, and its counters; the
# rows named Dfs/MODEL/... and OptimalPartition/MODEL/... (bench_local_sgd's zoo
# runs) are paired into one table, the DFS beside the dynamic programme.
benchmark_table() {
  python3 - "$1" <<'EOF'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
if any(r.get("run_type") == "aggregate" for r in runs):
    runs = [r for r in runs if r.get("aggregate_name") == "median"]
name = lambda r: r.get("run_name", r["name"])
def number(x):
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x)}"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"
def time(r, key):
    return f"{number(r[key])} {r['time_unit']}"
def counters(r):
    skip = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads",
            "iterations", "real_time", "cpu_time", "time_unit", "family_index",
            "per_family_instance_index", "aggregate_name", "aggregate_unit"}
    out = []
    for key, value in r.items():
        if key in skip or not isinstance(value, (int, float)):
            continue
        out.append(f"{value / 1e6:.0f} M events/s" if key == "events/s" else f"{key}={number(value)}")
    return ", ".join(out)
zoo = {name(r): r for r in runs if name(r).startswith(("Dfs/", "OptimalPartition/"))}
rest = [r for r in runs if name(r) not in zoo]
print("| benchmark | wall | CPU | counters |")
print("|---|---:|---:|---|")
for r in rest:
    print(f"| {name(r)} | {time(r, 'real_time')} | {time(r, 'cpu_time')} | {counters(r)} |")
if zoo:
    print("\nZoo models (1Gbit, 16 workers): the seed's DFS against the dynamic programme.\n")
    print("| model | L | H | DFS nodes | DFS CPU | DP CPU | DFS wall | DP wall |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for key, dfs in zoo.items():
        if not key.startswith("Dfs/"):
            continue
        dp = zoo[key.replace("Dfs/", "OptimalPartition/", 1)]
        parts = key.split("/")
        print(f"| {parts[1]} | {number(dfs['L'])} | {parts[-1].removeprefix('H:')} | {number(dfs['nodes'])} | "
              f"{time(dfs, 'cpu_time')} | {time(dp, 'cpu_time')} | {time(dfs, 'real_time')} | {time(dp, 'real_time')} |")
EOF
}

speed() {
  local before after
  printf '### bench_sim\n\n```sh\nbuild-figures/tools/bench_sim --benchmark_repetitions=%s --benchmark_report_aggregates_only=true\n```\n\n' "$repetitions"
  before=$(load)
  "$build/tools/bench_sim" --benchmark_repetitions="$repetitions" --benchmark_report_aggregates_only=true \
    --benchmark_out="$work/sim.json" --benchmark_out_format=json >/dev/null
  after=$(load)
  printf 'Load average (1, 5, 15 min) before: %s; after: %s; %s cores.\n\n' "$before" "$after" "$(nproc)"
  benchmark_table "$work/sim.json"
  printf '\n### bench_local_sgd\n\n```sh\nbuild-figures/tools/bench_local_sgd --benchmark_min_time=0.2\n```\n\n'
  before=$(load)
  "$build/tools/bench_local_sgd" --benchmark_min_time=0.2 \
    --benchmark_out="$work/local.json" --benchmark_out_format=json >/dev/null
  after=$(load)
  printf 'Load average (1, 5, 15 min) before: %s; after: %s; %s cores.\n\n' "$before" "$after" "$(nproc)"
  benchmark_table "$work/local.json"
  printf '\n'
}

# One predicted timeline (weft simulate, so partition and credit are tuned),
# summarised from its Chrome trace, in iteration 2 (steady state). All-reduce:
# worker 0's messages (count, most in flight at once, sizes), the time its
# communication lane is busy, and how long communication runs on after the
# backward pass. Parameter server: per fused group, the spread of the P workers'
# push starts (the staggering) against how long a push lasts (the incast).
trace_stats() {
  local label=$1
  shift
  "$build/weft" simulate "$@" --trace "$work/trace.json" --trace-iterations 4 >"$work/summary.txt"
  printf '```sh\nbuild-figures/weft simulate %s --trace t.json --trace-iterations 4\n```\n\n' "$*"
  python3 - "$work/trace.json" "$label" <<'EOF'
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
comm = [e for e in events if e["tid"] != 1]
eps = 1e-3  # us: intervals that only touch do not overlap
mib = lambda b: f"{b / 2**20:.3g} MiB"
it = 2  # steady state: iteration 0 is the warm-up
if any(e["name"].startswith("push ") for e in comm):
    print(f"{sys.argv[2]}, iteration {it}, every worker's pushes by fused group:\n")
    print("| group | bytes | push starts spread over ms | mean push ms | pushes in flight at its first start |")
    print("|---|---:|---:|---:|---:|")
    pushes = [e for e in comm if e["name"].startswith("push ") and e["args"]["iteration"] == it]
    names = sorted({e["name"] for e in pushes}, key=lambda n: min(e["ts"] for e in pushes if e["name"] == n))
    for name in names:
        group = [e for e in pushes if e["name"] == name]
        first = min(e["ts"] for e in group)
        in_flight = sum(1 for e in comm if e["name"].startswith("push ")
                        and e["ts"] <= first + eps and first < e["ts"] + e["dur"] - eps)
        spread = max(e["ts"] for e in group) - first
        mean = sum(e["dur"] for e in group) / len(group)
        label = name.removeprefix("push ").split(" to server")[0]
        print(f"| {label} | {mib(group[0]['args']['bytes'])} | {spread / 1e3:.1f} | {mean / 1e3:.1f} | {in_flight} |")
else:
    print(f"{sys.argv[2]}, worker 0, iteration {it}:\n")
    print("| messages | most at once | smallest | largest | comm lane busy ms | backward end → last comm end ms |")
    print("|---:|---:|---:|---:|---:|---:|")
    mine = [e for e in events if e["pid"] == 0]
    msgs = sorted((e for e in mine if e["tid"] != 1 and e["args"]["iteration"] == it), key=lambda e: e["ts"])
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in msgs]
    most = max(sum(1 for s, t in spans if s <= a + eps and a < t - eps) for a, _ in spans)
    busy, end = 0.0, float("-inf")
    for s, t in spans:  # the union of the intervals, sorted by start
        busy += max(0.0, t - max(s, end))
        end = max(end, t)
    bp_end = max(e["ts"] + e["dur"] for e in mine
                 if e["tid"] == 1 and e["args"]["iteration"] == it and e["name"].startswith("bp "))
    sizes = [e["args"]["bytes"] for e in msgs]
    print(f"| {len(msgs)} | {most} | {mib(min(sizes))} | {mib(max(sizes))} | "
          f"{busy / 1e3:.1f} | {(end - bp_end) / 1e3:.1f} |")
EOF
  printf '\n'
  grep -v '^trace:' "$work/summary.txt" | sed 's/^/    /'
  printf '\n'
}

traces() {
  trace_stats "dcredit, resnet50, 32 workers, 10Gbit" --model resnet50 --workers 32 --bandwidth 10Gbit --strategy dcredit
  trace_stats "bytescheduler, resnet50, 32 workers, 10Gbit" --model resnet50 --workers 32 --bandwidth 10Gbit --strategy bytescheduler
  trace_stats "dcredit, gpt2, 8 workers, 1Gbit" --model gpt2 --workers 8 --bandwidth 1Gbit --strategy dcredit
  trace_stats "bytescheduler, gpt2, 8 workers, 1Gbit" --model gpt2 --workers 8 --bandwidth 1Gbit --strategy bytescheduler
  trace_stats "dcredit, gpt2, 8 workers, 10Gbit" --model gpt2 --workers 8 --bandwidth 10Gbit --strategy dcredit
  trace_stats "ps-interleaved T=3, resnet50, 8 workers, 1 server, 1Gbit" --model resnet50 --workers 8 --bandwidth 1Gbit --arch ps --strategy ps-interleaved --T 3
}

# Each planner table of BENCHMARKS.md is the block after the line
# "build-figures/tools/plan_tables NAME" and its closing fence, up to a blank line.
check() {
  local table status=0
  for table in dcredit local-sgd ps; do
    "$build/tools/plan_tables" "$table" >"$work/$table.md"
    if python3 - "$root/BENCHMARKS.md" "$table" "$work/$table.md" <<'EOF'
import sys
doc, table, now = open(sys.argv[1]).read(), sys.argv[2], open(sys.argv[3]).read().rstrip("\n")
marker = f"build-figures/tools/plan_tables {table}\n```\n\n"
start = doc.find(marker)
if start < 0:
    sys.exit(f"BENCHMARKS.md: no table after 'plan_tables {table}'")
start += len(marker)
end = doc.find("\n\n", start)
if doc[start:end if end >= 0 else len(doc)] != now:
    sys.exit(f"BENCHMARKS.md: table '{table}' differs from what plan_tables {table} prints")
EOF
    then
      echo "BENCHMARKS.md: table '$table' is up to date"
    else
      status=1
    fi
  done
  return $status
}

# Engine overhead (issue 3): tools/overhead_bench.cc says what is timed and how.
overhead() {
  printf '### Engine overhead, 1 process\n\n```sh\nbuild-figures-runtime/tools/bench_overhead %s\n```\n\n' "$overhead_args"
  # shellcheck disable=SC2086  # OVERHEAD_ARGS is a list of flags, split on purpose
  "$runtime_build/tools/bench_overhead" $overhead_args
  printf '\n'
}

# Convergence under a slow link (issue 5): weft bench's accuracy mode, then per
# strategy the wall-clock to 80% and to 85% and the accuracy at the last
# evaluation, from bench.json.
convergence() {
  local before after out
  out=$(realpath --relative-to="$root" "$convergence_out")
  printf '### Convergence, cnn on Fashion-MNIST\n\n```sh\nweft bench %s --out %s\n```\n\n' "$convergence_args" "$out"
  before=$(load)
  # shellcheck disable=SC2086  # CONVERGENCE_ARGS is a list of flags, split on purpose
  "$runtime_build/weft" bench $convergence_args --out "$convergence_out" >"$work/bench.txt" 2>"$work/bench.err" ||
    { cat "$work/bench.err" >&2; return 1; }
  after=$(load)
  printf 'Load average (1, 5, 15 min) before: %s; after: %s; %s cores.\n\n' "$before" "$after" "$(nproc)"
  python3 - "$convergence_out/bench.json" <<'EOF'
import json, sys
bench = json.load(open(sys.argv[1]))
def reach(curve, target, clock):
    hit = next((p for p in curve if p["accuracy"] >= target), None)
    return f"{hit[clock]:.0f} s" if hit else "not reached"
def at(curve, target):
    hit = next((p for p in curve if p["accuracy"] >= target), None)
    return f"{reach(curve, target, 'wall_s')} ({reach(curve, target, 'training_s')}, iter {hit['iter'] + 1})" \
        if hit else "not reached"
print(f"{bench['workers']} workers, batch {bench['batch']} each, {bench['optimizer']} lr {bench['lr']}, "
      f"H = {bench['H']}, link {', '.join(l['link'] for l in bench['links'])}. Times: rank 0's wall-clock "
      f"from its start, evaluations included (in brackets: without them).\n")
print("| strategy | iteration, measured / predicted | to 80% | to 85% | last evaluation | steps |")
print("|---|---:|---:|---:|---:|---:|")
for r in bench["runs"]:
    curve = r["accuracy"]
    last = f"{100 * curve[-1]['accuracy']:.2f}%" if curve else "none"
    predicted = r.get("predicted_iteration_s")
    predicted = "none" if predicted is None else f"{1e3 * predicted:.1f}"
    print(f"| {r['strategy']} | {1e3 * r['measured_iteration_s']:.1f} / {predicted} ms | {at(curve, 0.80)} | "
          f"{at(curve, 0.85)} | {last} | {r['steps']} |")
for f in bench["failed"]:
    print(f"\n{f['strategy']} on {f['link']} failed: {f['message']} ({f['log']})")
EOF
  printf '\n![test accuracy against wall-clock](%s/accuracy.png)\n\n' "$out"
}

case $what in
  check) check ;;
  overhead) overhead ;;
  convergence) convergence ;;
  tables) tables ;;
  speed) speed ;;
  traces) traces ;;
  all) speed; tables; traces ;;
esac
