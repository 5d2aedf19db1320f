#!/usr/bin/env bash
# Bad input as a careless or hostile user gives it (issue 46): each case
# must end quickly with the exit status and the one-line message a user
# expects. Usage: check_bad_input.sh RDTX_BENCH RDTX_PERF CONF_DIR
set -u
bench=$1
perf=$2
conf=$3
tmp=$(mktemp -d /tmp/rdtx-bad-input-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failed=0
count=0
quick=(--duration 0.05 --warmup 0 --no-progress --no-steady-state -q)

# expect STATUS SECONDS 'stderr text' -- command...: the command exits with
# STATUS within SECONDS and its standard error contains the text.
expect() {
  local want=$1 secs=$2 text=$3
  shift 4
  count=$((count + 1))
  local err rc
  err=$(timeout -s KILL "$secs" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne "$want" ] || [[ "$err" != *"$text"* ]]; then
    echo "FAILED  $* (exit $rc, want $want with '$text')"
    sed 's/^/        /' <<<"$err" | tail -5
    failed=$((failed + 1))
  else
    echo "ok      $* -> $rc: $(head -1 <<<"$err")"
  fi
}

# Item 1: --csv names a device, a FIFO or a missing directory: refused
# before the run (a device's header line never ended).
mkfifo "$tmp/fifo.csv"
expect 2 10 "--csv /dev/full: not a regular file" -- "$bench" -- "${quick[@]}" --csv /dev/full
expect 2 10 "--csv /dev/zero: not a regular file" -- "$bench" -- "${quick[@]}" --csv /dev/zero
expect 2 10 "not a regular file" -- "$bench" -- "${quick[@]}" --csv "$tmp/fifo.csv"
expect 2 10 "--csv /nonexistent-rdtx/x.csv: no directory" -- "$bench" -- "${quick[@]}" --csv /nonexistent-rdtx/x.csv
# --json the same way before the run (exit 2), except that a pipe or a
# FIFO a reader holds open takes the report; a FIFO nobody reads is refused
# rather than waited on.
mkfifo "$tmp/fifo.json"
expect 2 10 "--json $tmp/fifo.json: a FIFO that no process reads" -- "$bench" -- "${quick[@]}" --json "$tmp/fifo.json"
expect 2 10 "--json /nonexistent-rdtx/x.json: no directory" -- "$bench" -- "${quick[@]}" --json /nonexistent-rdtx/x.json
expect 2 10 "--json $tmp: is a directory" -- "$bench" -- "${quick[@]}" --json "$tmp"
expect 1 20 "cannot write /dev/full" -- "$bench" -- "${quick[@]}" --json /dev/full
count=$((count + 1))
(timeout 20 cat "$tmp/fifo.json" >"$tmp/from-fifo.json" &)
sleep 0.2
if timeout -s KILL 20 "$bench" -- "${quick[@]}" --json "$tmp/fifo.json" >/dev/null 2>&1 && sleep 0.5 &&
   python3 -m json.tool "$tmp/from-fifo.json" >/dev/null 2>&1; then
  echo "ok      --json to a FIFO with a reader: the reader got the JSON report"
else
  echo "FAILED  --json to a FIFO with a reader: no JSON report read from it"
  failed=$((failed + 1))
fi
head -c 1000000 /dev/zero | tr '\0' x >"$tmp/long.csv"
expect 1 20 "first line is longer than 64 KiB" -- "$bench" -- "${quick[@]}" --csv "$tmp/long.csv"

# Item 5: --print-config loads back (every preset: test/bench).
"$bench" -- --config "$conf/smallbank/2pl-rpc.toml" --print-config >"$tmp/pc.toml"
expect 0 20 "" -- "$bench" -- "${quick[@]}" --config "$tmp/pc.toml" --print-config

# Item 6: a report that cannot be written fails the run; a benchmark that
# completed nothing fails.
count=$((count + 1))
if timeout -s KILL 20 "$bench" -- "${quick[@]}" >/dev/full 2>"$tmp/err"; then
  echo "FAILED  rdtx-bench >/dev/full exited 0"
  failed=$((failed + 1))
elif ! grep -q "cannot write to standard output" "$tmp/err"; then
  echo "FAILED  rdtx-bench >/dev/full: $(cat "$tmp/err")"
  failed=$((failed + 1))
else
  echo "ok      rdtx-bench >/dev/full -> $(head -1 "$tmp/err")"
fi
count=$((count + 1))
if timeout -s KILL 20 "$bench" -- --config "$conf/smallbank/occ-onesided.toml" --print-config >/dev/full 2>/dev/null; then
  echo "FAILED  rdtx-bench --print-config >/dev/full exited 0"
  failed=$((failed + 1))
else
  echo "ok      rdtx-bench --print-config >/dev/full fails"
fi
expect 1 20 "no operation completed" -- "$perf" -- --verb echo --device shm,ud_drop=1 --duration 0.05 --warmup 0
expect 2 10 "--batch 2: --verb oracle" -- "$perf" -- --verb oracle --batch 2 --duration 0.05 --warmup 0
expect 2 10 "--device" -- "$perf" -- --device shm,latency_ns=-5 --duration 0.05 --warmup 0

# Item 7: errors found before the EAL starts and anything loads (exit 2).
expect 2 10 "namdb.oracle_node = 5, but the cluster has 4 nodes" -- "$bench" -- "${quick[@]}" \
  --config "$conf/ycsb/namdb-onesided.toml" --set cluster.nodes=4 --set namdb.oracle_node=5
expect 2 10 "calvin.max_accesses = 8 is below the largest read/write set" -- "$bench" -- "${quick[@]}" \
  --config "$conf/tpcc-no/calvin-onesided.toml" --set calvin.max_accesses=8
expect 2 10 "calvin.inputs = '/nonexistent-rdtx/in': no directory" -- "$bench" -- "${quick[@]}" \
  --config "$conf/smallbank/calvin-onesided.toml" --set calvin.inputs=/nonexistent-rdtx/in
expect 2 10 "calvin.replay: cannot open $tmp/none.n0w0c0" -- "$bench" -- "${quick[@]}" \
  --config "$conf/smallbank/calvin-onesided.toml" --set calvin.replay="$tmp/none"
expect 2 10 "does not fit the device's 64-byte datagrams" -- "$bench" -- "${quick[@]}" \
  --config "$conf/ycsb/occ-rpc.toml" --set cluster.devargs=shm,mtu=64 --set ycsb.record_bytes=4096

# Item 8: refusals that were missing or came late.
expect 2 10 "'127.0.0.1:17301' is node 0's address too" -- "$bench" -- "${quick[@]}" --node 0 \
  --set cluster.mode=process --set cluster.hosts=127.0.0.1:17301,127.0.0.1:17301
expect 2 10 "key 'latency_ns' given twice" -- "$bench" -- "${quick[@]}" --set cluster.devargs=shm,latency_ns=5,latency_ns=9
expect 2 10 "pause_node=5 is not a node of the cluster (0..1)" -- "$bench" -- "${quick[@]}" \
  --set cluster.devargs=shm,pause_node=5,pause_at_ms=1,pause_ms=1
mkdir "$tmp/hist" && touch "$tmp/hist/history-n0-w0.rdtxh"
expect 2 10 "holds another run's history files (history-n0-w0.rdtxh)" -- "$bench" -- "${quick[@]}" --history "$tmp/hist"

# Items 2 and 3: a replay reads bounded regular files, and only the
# recording of this configuration, undamaged.
calvin=("$bench" -- "${quick[@]}" --config "$conf/smallbank/calvin-onesided.toml" --set smallbank.accounts_per_node=1000)
for n in 0 1; do ln -s /dev/zero "$tmp/zero.n${n}w0c0"; done
expect 2 10 "calvin.replay: $tmp/zero.n0w0c0 is not a regular file" -- "${calvin[@]}" --set calvin.replay="$tmp/zero"
expect 0 30 "" -- "${calvin[@]}" --set calvin.inputs="$tmp/in"
expect 0 30 "" -- "${calvin[@]}" --set calvin.replay="$tmp/in"
expect 2 10 "calvin.replay: $tmp/in.n0w0c0 was recorded under another configuration" -- "${calvin[@]}" \
  --set smallbank.accounts_per_node=2000 --set calvin.replay="$tmp/in"
printf '\x5a' | dd of="$tmp/in.n1w0c0" bs=1 seek=40 conv=notrunc status=none
expect 2 10 "calvin.replay: $tmp/in.n1w0c0 is damaged" -- "${calvin[@]}" --set calvin.replay="$tmp/in"

# Item 4: virtual time's floors, and a progress line per wall second
# however slowly the virtual clock runs.
vt=(--set run.virtual_time=true --set run.virtual_cost=model --set run.virtual_work_ns=0 --set run.virtual_resume_ns=0)
expect 2 10 "run.virtual_pass_ns = 1 is out of range [50," -- "$bench" -- "${quick[@]}" "${vt[@]}" --set run.virtual_pass_ns=1
expect 2 10 "run.virtual_max_pass_us = 0.001 is out of range" -- "$bench" -- "${quick[@]}" --set run.virtual_time=true \
  --set run.virtual_max_pass_us=0.001
count=$((count + 1))
err=$(timeout -s KILL 30 "$bench" -- -q --no-steady-state --duration 0.01 --warmup 0 "${vt[@]}" \
  --set run.virtual_pass_ns=50 --set run.progress_s=0.2 2>&1 >/dev/null)
if [[ "$err" != *"[wall "*", virtual "*" committed/s"* ]]; then
  echo "FAILED  virtual time: no progress line in wall time: $(tail -3 <<<"$err")"
  failed=$((failed + 1))
else
  echo "ok      virtual time: $(grep -m1 '^\[wall' <<<"$err")"
fi

# Item 9: a run removes its EAL runtime directory (without --no-shconf it
# holds the primary's config and memory maps too); --cleanup removes what
# a run killed with SIGKILL left, and nothing of a live process.
if [ "$(id -u)" -eq 0 ]; then rt=/var/run/dpdk; else rt=${XDG_RUNTIME_DIR:-/tmp}/dpdk; fi
count=$((count + 1))
"$bench" -l 0 --no-huge --no-pci -m 512 -- "${quick[@]}" >/dev/null 2>&1 &
pid=$!
wait $pid
if [ -e "$rt/rdtx-$pid" ]; then
  echo "FAILED  a run left its EAL runtime directory $rt/rdtx-$pid: $(ls "$rt/rdtx-$pid" | tr '\n' ' ')"
  failed=$((failed + 1))
else
  echo "ok      a run removes its EAL runtime directory"
fi
count=$((count + 1))
"$bench" -- -q --no-progress --duration 60 --warmup 0 >/dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do
  ls /dev/shm/rdtx.rdtx-"$pid"-* >/dev/null 2>&1 && [ -d "$rt/rdtx-$pid" ] && break
  sleep 0.1
done
kill -9 $pid
wait $pid 2>/dev/null
mkdir -p "$rt/rdtx-$$" && touch "$rt/rdtx-$$/config"  # a live process's: kept
left=$(ls /dev/shm/rdtx.rdtx-"$pid"-* 2>/dev/null | wc -l)
if [ "$left" -eq 0 ] || [ ! -d "$rt/rdtx-$pid" ]; then
  echo "FAILED  the killed run left nothing to clean up (shm files: $left, $rt/rdtx-$pid)"
  failed=$((failed + 1))
elif ! out=$("$bench" --cleanup 2>&1) || [[ "$out" != *"removed $rt/rdtx-$pid"* ]]; then
  echo "FAILED  rdtx-bench --cleanup: $out"
  failed=$((failed + 1))
elif ls /dev/shm/rdtx.rdtx-"$pid"-* >/dev/null 2>&1 || [ -e "$rt/rdtx-$pid" ] || [ ! -e "$rt/rdtx-$$/config" ]; then
  echo "FAILED  rdtx-bench --cleanup left the killed run's files, or removed a live process's"
  failed=$((failed + 1))
else
  echo "ok      rdtx-bench --cleanup removed a killed run's $left shm files and $rt/rdtx-$pid"
fi
rm -rf "${rt:?}/rdtx-$$"

echo "$((count - failed)) of $count cases passed"
[ "$failed" -eq 0 ]
