# Sourced by the scripts that run jobs: what the recovery policy registry
# says (relaxps-ctl policies --json), so that no script knows a policy by
# name. After load_policies BIN:
#   POLICY_NAMES         the registered policies, in registry order
#   NEED[p.field]        policy p's RecoveryNeeds field (include/relaxps/
#                        recovery_policy.h): min_servers, experiment_servers,
#                        min_replicas, store_kind, restart, restart_flags,
#                        tolerates_server_loss, tolerates_chain_loss,
#                        tolerates_pause, rolls_back ("true"/"false" for bools)
#   POLICIES_JSON        the registry's JSON, as relaxps-ctl printed it
# Returns non-zero (with a message) if relaxps-ctl is missing or fails.
declare -A NEED
POLICY_NAMES=()
POLICIES_JSON=""

load_policies() {  # load_policies BIN_DIR
  local ctl="$1/relaxps-ctl" decl
  [ -x "$ctl" ] || { echo "policies.sh: $ctl not found: run scripts/build.sh first" >&2; return 1; }
  POLICIES_JSON=$("$ctl" policies --json) || { echo "policies.sh: relaxps-ctl policies failed" >&2; return 1; }
  decl=$(/usr/bin/python3 -c '
import json, shlex, sys
for p in json.load(sys.stdin):
    print("POLICY_NAMES+=(%s)" % shlex.quote(p["name"]))
    for k, v in p["needs"].items():
        v = ("true" if v else "false") if isinstance(v, bool) else str(v)
        print("NEED[%s]=%s" % (shlex.quote(p["name"] + "." + k), shlex.quote(v)))
' <<<"$POLICIES_JSON") || { echo "policies.sh: cannot parse relaxps-ctl policies --json" >&2; return 1; }
  eval "$decl"
}

# is_policy NAME: true if NAME is registered.
is_policy() {
  local p
  for p in "${POLICY_NAMES[@]}"; do [ "$p" = "$1" ] && return 0; done
  return 1
}
