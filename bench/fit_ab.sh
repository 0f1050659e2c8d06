#!/bin/bash
# Two weft binaries' all-reduce fits side by side (BENCHMARKS.md "A fit timed in
# rounds"): `weft profile --network` as `weft bench` runs it (4 workers under
# `weft netem`, messages up to 1 MiB, 15 repeats), by OLD and then by NEW, in
# turn, ROUNDS times. With SPELL seconds > 0, two busy loops take the cores for
# the first SPELL seconds of each fit: a slow spell of the machine, on cue.
# Prints one line per fit: link, binary, round, spell, its wall time, a, and each
# size's all-reduce median in ms (KiB:ms). Needs root.
#   sudo bench/fit_ab.sh /tmp/weft-old build/weft 4 20Mbit 8 [OUT]
set -eu
usage="usage: $0 OLD_WEFT NEW_WEFT ROUNDS LINK SPELL_S [OUT]"
old=${1:?$usage}
new=${2:?$usage}
rounds=${3:?$usage}
link=${4:?$usage}
spell=${5:?$usage}
out=${6:-$(mktemp -d)}
mkdir -p "$out"
hogs=()
trap 'kill "${hogs[@]}" 2>/dev/null || true' EXIT
for round in $(seq "$rounds"); do
  for which in old new; do
    weft=$old
    [ "$which" = new ] && weft=$new
    fit=$out/$link-$which-$round-spell$spell.json
    hogs=()
    if [ "$spell" != 0 ]; then
      for _ in 1 2; do
        timeout "$spell" sh -c 'while :; do :; done' &
        hogs+=($!)
      done
    fi
    start=$(date +%s.%N)
    "$weft" netem --workers 4 --bandwidth "$link" -- "$weft" profile --network --max-bytes 1048576 --repeats 15 \
      --out "$fit" > "$out/fit.log" 2>&1 || { echo "$which $round failed:" >&2; tail -5 "$out/fit.log" >&2; exit 1; }
    end=$(date +%s.%N)
    wait "${hogs[@]}" 2>/dev/null || true
    python3 - "$fit" "$link $which $round spell=$spell" "$start" "$end" <<'PY'
import json, sys
fit = json.load(open(sys.argv[1]))
sizes = " ".join("%d:%.1f" % (p["bytes"] >> 10, 1e3 * p["allreduce_s"]) for p in fit["points"])
print(sys.argv[2], "%.0fs" % (float(sys.argv[4]) - float(sys.argv[3])), "a=%.2fms" % (1e3 * fit["a_s"]), sizes,
      flush=True)
PY
  done
done
