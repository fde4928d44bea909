# Sourced by e2e shell tests that run scripts/run_local.sh in the background
# (metrics_scrape_test.sh, ctl_json_test.sh). Requires OUT (the test's
# temporary folder). Provides:
#   RUN_PID            the background run_local.sh, once started ("" before)
#   cleanup            stops it (run_local.sh stops every process it started
#                      on SIGTERM) and removes OUT; installed as the EXIT trap
#   fail MESSAGE...    prints FAIL and run_local.sh's log, exits 1
RUN_PID=""
cleanup() {
  if [ -n "$RUN_PID" ] && kill -0 "$RUN_PID" 2>/dev/null; then
    kill -TERM "$RUN_PID"
    wait "$RUN_PID" 2>/dev/null
  fi
  rm -rf "$OUT"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- run_local.sh"; cat "$OUT/run.log" 2>/dev/null; exit 1; }
