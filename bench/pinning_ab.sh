#!/bin/bash
# Pinned against shared cores, side by side (BENCHMARKS.md "Hosts on cores"):
# weft's ssgd and mgwfbp and the PyTorch DDP peer, 4 workers under `weft netem`
# (WORKERS of them, default 4) at 100Mbit and 1Gbit, each run once with every
# process pinned to its share of the cores (--cores pinned) and once on any core
# (--cores shared), in turn, ROUNDS times.
# Prints one line per run: link, strategy, placement, round, rank 0's median
# iteration in ms (iterations 10..79). Needs root.
#   sudo bench/pinning_ab.sh results/frames-capped [ROUNDS] [OUT]
# The bench folder gives each link's profile and network fit, which fix the
# schedule (mgwfbp's merging) whatever the placement.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
weft=$root/build/weft
bench=${1:?usage: $0 BENCH_FOLDER [ROUNDS] [OUT]}
rounds=${2:-3}
workers=${WORKERS:-4}
out=${3:-$(mktemp -d)}
mkdir -p "$out"
for round in $(seq "$rounds"); do
  for link in 100Mbit 1Gbit; do
    for strategy in ssgd mgwfbp pytorch-ddp; do
      for placement in pinned shared; do
        metrics=$out/$link-$strategy-$placement-$round.jsonl
        rm -f "$metrics"
        if [ "$strategy" = pytorch-ddp ]; then
          command=(/usr/bin/python3 "$root/bench/ddp_peer.py" --steps 80 --metrics "$metrics")
        else
          command=("$weft" train --model cnn --strategy "$strategy" --steps 80 --no-progress
                   --profile "$bench/profile-$link.json" --network "$bench/net-$link.json" --metrics "$metrics")
        fi
        "$weft" netem --workers "$workers" --bandwidth "$link" --cores "$placement" -- "${command[@]}" > "$out/run.log" 2>&1 ||
          { echo "$link $strategy $placement $round failed:" >&2; tail -5 "$out/run.log" >&2; exit 1; }
        python3 - "$metrics" "$link $strategy $placement $round" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
times = [r["iteration_s"] for r in rows if "iteration_s" in r and r["rank"] == 0 and r["iter"] >= 10]
print(sys.argv[2], "%.2f" % (1e3 * statistics.median(times)))
PY
      done
    done
  done
done
