#!/usr/bin/env bash
# Installs every Debian package that relaxps' build, tests and main job need.
# Idempotent: installs only what is missing (apt-get update first, as root).
# --no-python skips the Python package's (-DRELAXPS_WITH_PYTHON) packages.
set -euo pipefail
WITH_PYTHON=1
for arg in "$@"; do
  case "$arg" in
    --no-python) WITH_PYTHON=0 ;;
    *) echo "install_deps: unknown argument '$arg' (--no-python)" >&2; exit 2 ;;
  esac
done

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  dpkg-dev  # cpack -G DEB: dpkg-shlibdeps computes the relaxps package's Depends
  libzmq3-dev cppzmq-dev
  libprotobuf-dev protobuf-compiler
  librocksdb-dev
  libgflags-dev libgoogle-glog-dev
  libgtest-dev libgmock-dev
  libopenblas-dev
  zlib1g-dev
  clang-14 libclang-rt-14-dev  # scripts/fuzz.sh (libFuzzer), scripts/test.sh --clang-tsa
  dataset-fashion-mnist
  python3
  python3-jsonschema          # docs/events.schema.json checked by the events test
  gnuplot-nox                 # scripts/experiment.sh plots
  iptables iproute2           # run_local.sh --partition_server, the namespace test
  libcpp-httplib-dev          # Prometheus /metrics (common/metrics_exporter)
  prometheus curl             # promtool in e2e.metrics_scrape; the prometheus server in e2e.prometheus
  openssh-client              # scripts/launch.sh over ssh
  libzookeeper-mt-dev         # coordinator --coordination=zk:// (ZooKeeper C client)
  zookeeper default-jre-headless  # scripts/zk.sh: a local ZooKeeper for tests and run_local.sh
)
# The Python package relaxps (python/, RELAXPS_WITH_PYTHON), its tests and
# examples/pytorch_cnn.py, all for Debian's /usr/bin/python3.
if [ "$WITH_PYTHON" = 1 ]; then
  PACKAGES+=(pybind11-dev python3-dev python3-pybind11 python3-numpy python3-pytest python3-torch)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "install_deps: missing packages (${missing[*]}) and not root; run as root" >&2
    exit 1
  fi
fi
echo "install_deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
