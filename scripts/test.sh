#!/usr/bin/env bash
# Installs what is missing, builds (Release, tests on) and runs the whole
# test suite with CTest. Extra arguments go to ctest (e.g. -R server).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
cd "${BUILD_DIR:-build}"
# Two jobs: the multi-process tests each start a small cluster on 127.0.0.1.
ctest --output-on-failure -j "${CTEST_JOBS:-2}" --timeout 600 "$@"
