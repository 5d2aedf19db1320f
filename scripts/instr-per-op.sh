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
# BUILD must be a build configured with -Dcpu_arch=x86-64-v2 (or another
# level valgrind can run: not native on a CPU with AVX-512, not x86-64-v4):
# valgrind does not know AVX-512 and kills a program that uses it. The
# README's build is -Dcpu_arch=native; make one for this script with
#   scripts/build.sh build-v2 -Dcpu_arch=x86-64-v2
# The script checks BUILD's cpu_arch and refuses one valgrind cannot run.
#
# Caveat: callgrind runs ~50x slower, so work done per unit of wall time
# (timers, periodic scans) weighs ~50x more than in a native run.
set -euo pipefail
me=scripts/instr-per-op.sh
usage() {
  echo "usage: $me rpc BUILD BATCH OUTSTANDING | $me txn BUILD CONFIG [--set KEY=VALUE]..." >&2
  echo "  BUILD: a build configured with -Dcpu_arch=x86-64-v2 (scripts/build.sh build-v2 -Dcpu_arch=x86-64-v2)" >&2
  exit 2
}
[ $# -ge 3 ] || usage
mode=$1 build=$2; shift 2
case $mode in
  rpc) [ $# -eq 2 ] || usage ;;
  txn) ;;
  *) usage ;;
esac
command -v valgrind >/dev/null || { echo "$me: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
opts=$build/meson-info/intro-buildoptions.json
[ -f "$opts" ] || { echo "$me: $build is not a meson build directory (no $opts)" >&2; exit 2; }
arch=$(python3 -c "
import json, sys
print(next((o['value'] for o in json.load(open(sys.argv[1])) if o['name'] == 'cpu_arch'), ''))" "$opts")
avx512=no
grep -qw avx512f /proc/cpuinfo 2>/dev/null && avx512=yes
if [[ $arch == *v4* || $arch == *avx512* || ( $arch == native && $avx512 == yes ) ]]; then
  echo "$me: $build is built with -Dcpu_arch=$arch, whose AVX-512 instructions valgrind cannot run" \
    "(this CPU has AVX-512): configure another build with -Dcpu_arch=x86-64-v2," \
    "e.g. scripts/build.sh build-v2 -Dcpu_arch=x86-64-v2, and give it as BUILD" >&2
  exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # seconds -> "instructions operations"
  local d=$1; shift
  local rc=0
  if [ "$mode" = rpc ]; then
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" "$build/apps/rdtx-perf/rdtx-perf" -- --verb rpc \
      --batch "$b" --outstanding "$o" --duration "$d" --warmup 0.02 --json "$tmp/j" >"$tmp/log" 2>&1 || rc=$?
    key=ops
  else
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" "$build/apps/rdtx-bench/rdtx-bench" -l 0 --no-huge \
      --no-pci -- -q --no-progress --config "$conf" --duration "$d" --warmup 0 --set stats.breakdown=false "$@" \
      --json "$tmp/j" >"$tmp/log" 2>&1 || rc=$?
    key=attempted
  fi
  if [ "$rc" -ne 0 ] || [ ! -s "$tmp/j" ]; then
    echo "$me: the $d s run under callgrind failed (exit $rc); its last lines:" >&2
    tail -n 15 "$tmp/log" >&2
    return 1
  fi
  echo "$(awk '/^(summary|totals):/ {print $2; exit}' "$tmp/cg") $(python3 -c "
import json; d = json.load(open('$tmp/j')); print(d['points'][0]['ops'] if '$key' == 'ops' else d['attempted'])")"
}
if [ "$mode" = rpc ]; then b=$1 o=$2; short=0.2 long=0.6; else conf=$1; shift; short=0.5 long=1.5; fi
r1=$(run $short "$@")
r2=$(run $long "$@")
read -r i1 n1 <<<"$r1"
read -r i2 n2 <<<"$r2"
python3 -c "print(round(($i2 - $i1) / ($n2 - $n1)))"
