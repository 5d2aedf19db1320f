#!/usr/bin/env bash
# Everything that must pass before an issue is resolved, beyond CI (.ci/run):
# the release build's fast, conformance, membership, matrix, docs (every command of the
# docs run as written), stress (0.3 s a combination, random seed) and chaos
# suites; the sanitizer build (ASan+UBSan) over the fast,
# conformance suites; and, if the team's field test is present, every preset
# at its own and RCC's settings on two lcores plus the three-process cluster.
# Takes about an hour on two cores. Stops at the first step that fails.
#
# Usage: scripts/check-all.sh [--no-field-test]
set -euo pipefail
cd "$(dirname "$0")/.."
field=1
[ "${1:-}" = "--no-field-test" ] && field=0

step() { printf '\n== %s\n' "$*"; }

step "release build: fast, conformance, membership, matrix, docs, stress, chaos"
./scripts/build.sh build
./scripts/test.sh build fast conformance
./scripts/test.sh build membership
./scripts/test.sh build matrix
./scripts/test.sh build docs
./scripts/test.sh build stress
./scripts/test.sh build chaos

step "sanitizer build (ASan+UBSan): fast, conformance, matrix"
./scripts/build.sh build-asan -Dsanitize=true -Dbuildtype=debug
./scripts/test.sh build-asan fast conformance
./scripts/test.sh build-asan matrix

if [ "$field" = 1 ] && [ -x ../shared/tools/field-test.sh ]; then
  step "field test"
  ../shared/tools/field-test.sh
fi
step "all passed"
