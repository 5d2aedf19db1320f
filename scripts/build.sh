#!/usr/bin/env bash
# Configures (once) and builds rdtx. Usage: scripts/build.sh [BUILD_DIR [meson options...]]
# e.g. scripts/build.sh build-asan -Dsanitize=true
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" "$@"
fi
ninja -C "$dir"
