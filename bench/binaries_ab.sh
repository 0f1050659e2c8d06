#!/bin/bash
# Two weft binaries side by side (BENCHMARKS.md "A collective's lateness in
# plans"): each strategy trained by OLD and then by NEW, in turn, ROUNDS times,
# 4 workers under `weft netem` at 100Mbit and 1Gbit, on the profile and fit a
# stored bench measured for each link, so a difference is what the binaries plan
# and run, not the machine's profile. Each binary plans for itself (partition,
# windows) as `weft train` does.
# Prints one line per run: link, strategy, binary, round, the median over
# iterations 5.. of the ranks' mean iteration in ms. Needs root.
#   sudo bench/binaries_ab.sh /tmp/weft-old build/weft results/full-2026-12-03-again [ROUNDS] [OUT]
# STRATEGIES (default "mgwfbp dcredit") and LINKS (default "100Mbit 1Gbit") in the environment.
set -eu
old=${1:?usage: $0 OLD_WEFT NEW_WEFT BENCH_FOLDER [ROUNDS] [OUT]}
new=${2:?usage: $0 OLD_WEFT NEW_WEFT BENCH_FOLDER [ROUNDS] [OUT]}
bench=${3:?usage: $0 OLD_WEFT NEW_WEFT BENCH_FOLDER [ROUNDS] [OUT]}
rounds=${4:-4}
out=${5:-$(mktemp -d)}
mkdir -p "$out"
for round in $(seq "$rounds"); do
  for link in ${LINKS:-100Mbit 1Gbit}; do
    for strategy in ${STRATEGIES:-mgwfbp dcredit}; do
      for which in old new; do
        weft=$old
        [ "$which" = new ] && weft=$new
        metrics=$out/$link-$strategy-$which-$round.jsonl
        rm -f "$metrics"
        "$weft" netem --workers 4 --bandwidth "$link" -- "$weft" train --model cnn --strategy "$strategy" --batch 32 \
          --lr 0.05 --optimizer sgd --seed 0 --steps 60 --H 5 --no-progress --profile "$bench/profile-$link.json" \
          --network "$bench/net-$link.json" --bandwidth "$link" --metrics "$metrics" > "$out/run.log" 2>&1 ||
          { echo "$link $strategy $which $round failed:" >&2; tail -5 "$out/run.log" >&2; exit 1; }
        python3 - "$metrics" "$link $strategy $which $round" <<'PY'
import collections, json, statistics, sys
by_iteration = collections.defaultdict(list)
for line in open(sys.argv[1]):
    row = json.loads(line)
    if "iteration_s" in row and row["iter"] >= 5:
        by_iteration[row["iter"]].append(row["iteration_s"])
print(sys.argv[2], "%.2f" % (1e3 * statistics.median(statistics.mean(v) for v in by_iteration.values())), flush=True)
PY
      done
    done
  done
done
