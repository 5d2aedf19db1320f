#!/usr/bin/env bash
# Installs what rdtx needs to build and test on Debian 12, from Debian's
# archive only. Idempotent; run as root or with sudo available.
set -euo pipefail
pkgs=(
  g++ meson ninja-build pkg-config git python3
  libdpdk-dev libibverbs-dev libtbb-dev libtomlplusplus-dev libisal-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-matplotlib dpdk-dev
  # Measurement (doc/rdtx-perf.md: instruction counts with callgrind and
  # perf stat) and debugging; the tests do not need them.
  valgrind linux-perf gdb
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
