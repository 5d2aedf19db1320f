#!/usr/bin/env bash
# Runs meson test suites in a build dir and prints one closing line
# "tests: N passed, N failed, N skipped". Usage: scripts/test.sh BUILD_DIR SUITE...
# A sanitizer build (-Dsanitize=true, usually also -Dbuildtype=debug) runs
# 3-5x slower, so its tests get 4x meson's per-test timeouts (the timeouts
# catch hangs, not slowness); RDTX_TIMEOUT_MULTIPLIER overrides the factor.
# After the run, scripts/suite-time fails it when a test took more than half
# its timeout, or the README's test command more than its 300 s budget.
# Its preset runs (rdtx-bench-presets) measure 2 s instead of 0.2 s: TPC-C's
# median latency reaches 20-70 ms there, and rdtx-bench's steady-state check
# wants the window ten times that; RDTX_PRESET_SECONDS overrides it.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=$1
shift
args=()
for s in "$@"; do args+=(--suite "$s"); done
sanitized=0
if meson introspect "$dir" --buildoptions 2>/dev/null | python3 -c '
import json, sys
sys.exit(0 if any(o["name"] == "sanitize" and o["value"] is True for o in json.load(sys.stdin)) else 1)'; then
  sanitized=1
fi
mult=${RDTX_TIMEOUT_MULTIPLIER:-}
if [ -z "$mult" ]; then
  mult=1
  [ "$sanitized" -eq 1 ] && mult=4
fi
args+=(--timeout-multiplier "$mult")
if [ "$sanitized" -eq 1 ]; then export RDTX_PRESET_SECONDS=${RDTX_PRESET_SECONDS:-2}; fi
# A stale log from an earlier run must not be summarised as this one.
rm -f "$dir/meson-logs/testlog.json"
meson test -C "$dir" --print-errorlogs --num-processes 2 "${args[@]}"
rc=$?
python3 - "$dir/meson-logs/testlog.json" <<'PY'
import json, os, sys
if not os.path.exists(sys.argv[1]):
    print("tests: meson ran no test (a suite name that matches none? see above)")
    sys.exit(1)
counts = {"passed": 0, "failed": 0, "skipped": 0}
for line in open(sys.argv[1]):
    r = json.loads(line).get("result", "")
    key = {"OK": "passed", "EXPECTEDFAIL": "passed", "SKIP": "skipped"}.get(r, "failed")
    counts[key] += 1
# A failing test's log can be long (meson shows only its last 100 lines): show
# googletest's failure lines again, so that a CI log names what failed.
import re
pat = re.compile(r"Failure|\[  FAILED  \]|\.(cpp|hpp|py):[0-9]+|error:|FAIL")
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("result", "") in ("OK", "EXPECTEDFAIL", "SKIP"):
        continue
    out = (r.get("stdout") or "") + "\n" + (r.get("stderr") or "")
    hits = [l for l in out.splitlines() if pat.search(l)]
    print(f"--- failure lines of {r.get('name')} ({len(hits)}; at most 80 shown):")
    for l in hits[:80]:
        print("   ", l[:400])
print(f"tests: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
PY
summary=$?
# The time budget, from meson's own durations (scripts/suite-time): every
# test within half its timeout, and the README's test command (fast +
# conformance, or fast alone) within 300 s of wall time on two cores. A
# sanitizer build runs 3-5x slower: only the timeout margin applies there.
budget=0
suites=" $* "
if [ "$sanitized" -eq 0 ] && { [ "$suites" = " fast conformance " ] || [ "$suites" = " fast " ]; }; then
  budget=300
fi
./scripts/suite-time "$dir" --multiplier "$mult" --budget "$budget"
timing=$?
[ $rc -ne 0 ] && exit $rc
[ $summary -ne 0 ] && exit $summary
exit $timing
