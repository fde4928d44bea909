"""--chaos=SEED draws only what the registry says the policy tolerates, the
same schedule for the same seed."""
import unittest

import launch_util  # noqa: F401  (puts the package on sys.path)
from relaxps_launch import chaos

CFG = {"faults": 3, "from_s": 5, "to_s": 30, "down_s": 3, "min_gap_s": 8, "untolerated": False}


class ChaosTest(unittest.TestCase):
    def test_nothing_tolerated_draws_nothing(self):
        self.assertEqual(chaos.draw(1, {"tolerates_server_loss": False}, 2, 60, CFG), [])

    def test_only_tolerated_kinds(self):
        kill_only = {"tolerates_server_loss": True}
        for seed in range(20):
            faults = chaos.draw(seed, kill_only, 3, 60, CFG)
            self.assertEqual(len(faults), 3)
            self.assertTrue(all(f.action == "kill" for f in faults))
            self.assertTrue(all(f.target in ("server-0", "server-1", "server-2") for f in faults))
            times = [f.at_s for f in faults]
            self.assertEqual(times, sorted(times))
            self.assertTrue(all(b - a >= 8 - 1e-9 for a, b in zip(times, times[1:])), times)
            self.assertTrue(all(f.origin == f"chaos:{seed}" for f in faults))
        pause_only = {"tolerates_pause": True}
        self.assertTrue(all(f.action == "stop" and f.for_s == 9
                            for f in chaos.draw(4, pause_only, 2, 60, CFG)))

    def test_faults_never_overlap(self):
        needs = {"tolerates_server_loss": True, "tolerates_pause": True}
        for seed in range(50):
            faults = chaos.draw(seed, needs, 3, 30, CFG)
            for a, b in zip(faults, faults[1:]):
                self.assertGreaterEqual(b.at_s, a.at_s + (a.for_s or 0) + 8 - 0.1,
                                        [f.describe() for f in faults])

    def test_whole_chain_loss_kills_every_server_at_once(self):
        seen = False
        for seed in range(30):
            faults = chaos.draw(seed, {"tolerates_chain_loss": True}, 2, 60, CFG)
            by_time = {}
            for f in faults:
                by_time.setdefault(f.at_s, []).append(f.target)
            for targets in by_time.values():
                self.assertEqual(sorted(targets), ["server-0", "server-1"])
                seen = True
        self.assertTrue(seen)

    def test_same_seed_same_schedule(self):
        needs = {"tolerates_server_loss": True, "tolerates_pause": True}
        a = [f.describe() for f in chaos.draw(7, needs, 3, 60, CFG)]
        b = [f.describe() for f in chaos.draw(7, needs, 3, 60, CFG)]
        c = [f.describe() for f in chaos.draw(8, needs, 3, 60, CFG)]
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)


if __name__ == "__main__":
    unittest.main()
