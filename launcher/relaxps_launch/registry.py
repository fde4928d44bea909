"""The recovery policy registry, as relaxps-ctl policies --json prints it: what
each policy needs (servers, replicas, store kind), its restart rule and flags,
and the faults it tolerates. The launcher knows no policy by name."""
import json
import os
import subprocess


class RegistryError(Exception):
    pass


class Registry:
    def __init__(self, policies):
        self._policies = {p["name"]: p for p in policies}
        self._order = [p["name"] for p in policies]

    @classmethod
    def from_bin(cls, bin_dir):
        ctl = os.path.join(bin_dir, "relaxps-ctl")
        if not os.access(ctl, os.X_OK):
            raise RegistryError(f"{ctl} not found (build relaxps, or give bin_dir / --bin)")
        try:
            out = subprocess.run([ctl, "policies", "--json"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, timeout=30, check=True).stdout
            return cls(json.loads(out))
        except (subprocess.SubprocessError, ValueError) as e:
            raise RegistryError(f"relaxps-ctl policies --json failed: {e}") from None

    def names(self):
        return list(self._order)

    def get(self, name):
        return self._policies.get(name)


def restarts_servers(policy):
    """True if the policy's restart rule restarts a lost server (same id)."""
    return policy["needs"]["restart"] != "never"


def restart_flags(policy):
    return policy["needs"].get("restart_flags", "").split()
