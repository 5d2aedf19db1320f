#!/usr/bin/env bash
# Instructions per operation under callgrind, as a marginal count: the
# program's total instructions in a long and a short run, their difference
# divided by the difference of the operations completed, so start-up and
# loading cancel out. Stable across runs on a shared machine, unlike time.
# Needs valgrind (measurement only: apt-get install valgrind).
#
#   scripts/instr-per-op.sh rpc  BUILD BATCH OUTSTANDING    # per call, rdtx-perf --verb rpc
#   scripts/instr-per-op.sh txn  BUILD CONFIG [--set ...]   # per attempt, rdtx-bench, one lcore
#
# Caveat: callgrind runs ~50x slower, so work done per unit of wall time
# (timers, periodic scans) weighs ~50x more than in a native run.
set -euo pipefail
mode=$1 build=$2; shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # seconds -> "instructions operations"
  local d=$1; shift
  if [ "$mode" = rpc ]; then
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" "$build/apps/rdtx-perf/rdtx-perf" -- --verb rpc \
      --batch "$b" --outstanding "$o" --duration "$d" --warmup 0.02 --json "$tmp/j" >/dev/null 2>&1
    key=ops
  else
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" "$build/apps/rdtx-bench/rdtx-bench" -l 0 --no-huge \
      --no-pci -- -q --no-progress --config "$conf" --duration "$d" --warmup 0 --set stats.breakdown=false "$@" \
      --json "$tmp/j" >/dev/null 2>&1
    key=attempted
  fi
  echo "$(awk '/^(summary|totals):/ {print $2; exit}' "$tmp/cg") $(python3 -c "
import json; d = json.load(open('$tmp/j')); print(d['points'][0]['ops'] if '$key' == 'ops' else d['attempted'])")"
}
if [ "$mode" = rpc ]; then b=$1 o=$2; short=0.2 long=0.6; else conf=$1; shift; short=0.5 long=1.5; fi
read -r i1 n1 < <(run $short "$@")
read -r i2 n2 < <(run $long "$@")
python3 -c "print(round(($i2 - $i1) / ($n2 - $n1)))"
