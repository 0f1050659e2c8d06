#!/bin/bash
# Runs a command and then prints on stderr the CPU time it (and what it waited
# for) spent, and its wall time: under `weft netem`, what each rank and the
# emulated links it drives cost the machine (BENCHMARKS.md "The emulator's
# frames"). Exits with the command's status.
#   sudo build/weft netem --workers 4 --bandwidth 100Mbit -- bench/cpu_time.sh \
#       build/weft profile --network --min-bytes 358KiB --max-bytes 1432KiB --repeats 50
set -u
if [ $# -eq 0 ]; then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi
start=$(date +%s.%N)
"$@"
status=$?
end=$(date +%s.%N)
# This shell's children's CPU time, in clock ticks (proc(5): cutime, cstime).
read -r -a stat < /proc/$$/stat
ticks=$(getconf CLK_TCK)
awk -v rank="${RANK:-0}" -v u="${stat[15]}" -v s="${stat[16]}" -v hz="$ticks" -v a="$start" -v b="$end" \
  'BEGIN { printf "rank %s: user %.2f s, system %.2f s, wall %.3f s\n", rank, u / hz, s / hz, b - a }' >&2
exit "$status"
