#!/usr/bin/env bash
# Installs what rdtx needs to build and test on Debian 12, from Debian's
# archive only. Idempotent; run as root or with sudo available.
# Usage: scripts/install-deps.sh [--rdma-vm]
#   --rdma-vm  also what scripts/rdma-vm needs (QEMU, busybox, rdma-core's
#              tools, perftest) to boot Debian's kernel with a Soft-RoCE
#              device; without it, only the build and test packages.
set -euo pipefail
rdma_vm=0
for a in "$@"; do
  case $a in
    --rdma-vm) rdma_vm=1 ;;
    -h|--help) sed -n '2,8s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "install-deps: unknown option '$a' (valid: --rdma-vm)" >&2; exit 2 ;;
  esac
done
pkgs=(
  g++ meson ninja-build pkg-config git python3
  libdpdk-dev libibverbs-dev libtbb-dev libtomlplusplus-dev libisal-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-matplotlib dpdk-dev
  # ZooKeeper as the configuration store (doc/membership.md): its C client
  # for lib/membership, and the server's jar with a headless Java runtime,
  # which test/membership starts on a loopback port (Debian's `zookeeper`
  # package adds only scripts and config, and its `default-jre` a desktop
  # Java with GTK); no service is installed or enabled.
  libzookeeper-mt-dev libzookeeper-java default-jre-headless
  # Open MPI's launcher: test/membership starts a process cluster with
  # mpirun (doc/deployment.md "Starting under mpirun or srun"); rdtx links
  # nothing of MPI.
  openmpi-bin
  # Measurement (doc/rdtx-perf.md: instruction counts with callgrind and
  # perf stat) and debugging; the tests do not need them.
  valgrind linux-perf gdb
)
if [ $rdma_vm -eq 1 ]; then
  # scripts/rdma-vm: QEMU (TCG) boots Debian's kernel with a busybox
  # initramfs (cpio; kmod: modprobe, depmod); the guest runs the
  # host's rdma (iproute2), ibverbs tools and providers (rxe) and perftest.
  pkgs+=(qemu-system-x86 busybox-static cpio kmod iproute2
         rdma-core ibverbs-utils ibverbs-providers perftest)
fi
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
