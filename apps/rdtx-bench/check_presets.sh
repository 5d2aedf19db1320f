#!/usr/bin/env bash
# Runs every preset in conf/ briefly and fails if any does not load, run and
# pass its checks. Usage: check_presets.sh RDTX_BENCH CONF_DIR [SECONDS]
# SECONDS: each run's measured window, default $RDTX_PRESET_SECONDS or 0.2
# (scripts/test.sh sets 2 in a sanitizer build). With GTEST_TOTAL_SHARDS and
# GTEST_SHARD_INDEX (googletest's sharding variables, as the stress suites
# use them) it runs every TOTAL-th preset from INDEX on: meson runs the
# shards on both cores (apps/rdtx-bench/meson.build).
set -u
bench=$1
conf=$2
seconds=${3:-${RDTX_PRESET_SECONDS:-0.2}}
shards=${GTEST_TOTAL_SHARDS:-1}
shard=${GTEST_SHARD_INDEX:-0}
if ! [[ $shards =~ ^[1-9][0-9]*$ && $shard =~ ^[0-9]+$ ]] || [ "$shard" -ge "$shards" ]; then
  echo "GTEST_SHARD_INDEX=$shard of GTEST_TOTAL_SHARDS=$shards: want 0 <= index < total"
  exit 2
fi
failed=0
count=0
seen=0
while IFS= read -r f; do
  seen=$((seen + 1))
  [ $(((seen - 1) % shards)) -eq "$shard" ] || continue
  count=$((count + 1))
  # TPC-C presets load ~400 MB a warehouse at the specification's sizes
  # (the field test runs them so): here a scaled-down instance, which loads
  # in a fraction of a second (and in a sanitizer build).
  small=()
  if grep -q '^workload = "tpcc"' "$f"; then
    small=(--set tpcc.customers_per_district=300 --set tpcc.items=10000 --set tpcc.order_capacity=1000)
  fi
  if out=$("$bench" -- -q --config "$f" --duration "$seconds" --warmup 0 "${small[@]}" 2>&1); then
    echo "ok      $f: $(grep '^committed' <<<"$out" | tr -s ' ')"
  else
    echo "FAILED  $f (exit $?)"
    sed 's/^/        /' <<<"$out" | tail -20
    failed=$((failed + 1))
  fi
done < <(find "$conf" -name '*.toml' | sort)
if [ "$count" -eq 0 ]; then
  echo "no presets found under $conf"
  exit 1
fi
echo "$((count - failed)) of $count presets passed (shard $shard of $shards)"
[ "$failed" -eq 0 ]
