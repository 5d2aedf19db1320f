#!/usr/bin/env bash
# Crash injection (fault.kill_node, issue 48 item 1): a three-process
# cluster whose node 2 kills itself (SIGKILL) half a second into the
# measured window. Node 2 must die by SIGKILL after saying when; nodes 0
# and 1 must end within a bound, say which peer they lost, report their own
# figures up to then (their timelines stop about when node 2 died) with the
# check `cluster` failed (exit 1), and write their JSON. Then the keys'
# bad values, refused before the run (exit 2). Usage: check_crash.sh RDTX_BENCH CONF_DIR
set -u
bench=$1
conf=$2
tmp=$(mktemp -d /tmp/rdtx-crash-XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
failed=0
count=0
fail() {
  echo "FAILED  $name: $*"
  [ -f "$out" ] && sed 's/^/        /' "$out" | tail -8
  failed=$((failed + 1))
}
ok() { echo "ok      $name: $*"; }

port=$((20000 + RANDOM % 20000))
hosts=127.0.0.1:$port,127.0.0.1:$((port + 1)),127.0.0.1:$((port + 2))
for n in 0 1 2; do
  timeout -s KILL 120 "$bench" -l $((n % 2)) --no-huge --no-pci --file-prefix crash$$n$n -- -q --no-progress \
    --no-steady-state --config "$conf/smallbank/occ-rpc.toml" --duration 3 --warmup 0.2 \
    --set cluster.mode=process --set cluster.nodes=3 --set cluster.hosts=$hosts \
    --set fault.kill_node=2 --set fault.kill_at_s=0.5 --node $n --json "$tmp/n$n.json" >"$tmp/n$n.out" 2>&1 &
  pids+=($!)
done
rcs=()
for p in "${pids[@]}"; do
  wait "$p"
  rcs+=($?)
done
pids=()

count=$((count + 1)); name="node 2 dies"; out=$tmp/n2.out
if [ "${rcs[2]}" -ne 137 ]; then fail "exit ${rcs[2]}, want 137 (SIGKILL)"
elif ! grep -q "rdtx-bench: fault: node 2 kills itself (SIGKILL) 0.500 s into the measured window" "$out"; then
  fail "it did not say when it died"
else ok "$(grep -m1 'fault:' "$out")"; fi

for n in 0 1; do
  count=$((count + 1)); name="node $n reports on"; out=$tmp/n$n.out
  if [ "${rcs[$n]}" -ne 1 ]; then fail "exit ${rcs[$n]}, want 1"; continue; fi
  if ! grep -q "rdtx-bench: bootstrap: node 2 .*(this node's figures follow)" "$out"; then
    fail "it did not name the lost peer"; continue
  fi
  if ! grep -qE "^  cluster +FAILED: bootstrap: node 2" "$out" || ! grep -qE "^result: FAILED: cluster" "$out"; then
    fail "no failed check 'cluster' in its report"; continue
  fi
  # Its JSON: this node alone, the check failed, and a timeline that ran
  # until about when node 2 died (0.5 s: between 0.4 and 2.5 s of window,
  # the lost peer detected within the bootstrap monitor's bound) with
  # commits in its first 400 ms.
  if ! python3 - "$tmp/n$n.json" <<'PY' >"$tmp/why" 2>&1; then
import json, sys
d = json.load(open(sys.argv[1]))
assert d["aggregate"] is False, "aggregate"
assert d["checks"]["cluster"]["ok"] is False, d["checks"]["cluster"]
assert "node 2" in d["checks"]["cluster"]["message"], d["checks"]["cluster"]
assert d["checks"]["invariants"].get("not_checked") is True, d["checks"]["invariants"]
t = d["timeline"]
assert t["bin_ms"] == 1, t["bin_ms"]
assert 400 <= len(t["committed"]) <= 2500, len(t["committed"])
assert sum(t["committed"][:400]) > 0, "no commit before the kill"
assert sum(t["committed"]) + t["after_window"] == d["committed"], "the bins do not add up"
print(len(t["committed"]), "ms of timeline,", d["committed"], "commits")
PY
    fail "its JSON: $(tail -1 "$tmp/why")"; continue
  fi
  ok "exit 1, $(cat "$tmp/why")"
done

# Bad values: refused before the run, naming the key.
expect_refused() {
  local text=$1; shift
  count=$((count + 1)); name="refused: $*"; out=$tmp/refused.out
  timeout -s KILL 20 "$bench" -- -q --no-progress --duration 1 "$@" >"$out" 2>&1
  local rc=$?
  if [ "$rc" -ne 2 ] || ! grep -qF -- "$text" "$out"; then fail "exit $rc, want 2 with '$text'"
  else ok "$(grep -m1 -F -- "$text" "$out")"; fi
}
expect_refused 'fault.kill_node = 1 (--set) needs cluster.mode = "process"' --set fault.kill_node=1
expect_refused "is not a node of the cluster" --set cluster.mode=process --set cluster.hosts=127.0.0.1:1,127.0.0.1:2 \
  --node 0 --set fault.kill_node=5
expect_refused "is not within the measured window" --set cluster.mode=process --set cluster.hosts=127.0.0.1:1,127.0.0.1:2 \
  --node 0 --set fault.kill_node=1 --set fault.kill_at_s=2

echo "$((count - failed)) of $count cases passed"
[ "$failed" -eq 0 ]
