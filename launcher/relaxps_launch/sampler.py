"""sample_servers_s: every N seconds the supervisor reads each running
server's Prometheus counters (the same /metrics a Prometheus scrapes,
README.md "Metrics") into <out_dir>/servers.csv, so that the
experiment harness can plot per-server pushes/s over time (a run that adds
or drains servers: docs/elastic.md). A server that does not answer within
SCRAPE_TIMEOUT_S is left out of that sample; nothing else waits on it."""
import csv
import time
import urllib.error
import urllib.request

SCRAPE_TIMEOUT_S = 0.5
# servers.csv columns after time_s and server: the counters (and one gauge) kept.
SERIES = ("relaxps_server_pushes_total", "relaxps_server_pulls_total",
          "relaxps_server_updates_applied_total", "relaxps_server_bytes_in_total",
          "relaxps_server_shard_map_version")
COLUMNS = ["time_s", "server"] + [n[len("relaxps_server_"):] for n in SERIES]


def parse_metrics(text):
    """{name: value} of SERIES in a Prometheus text exposition (unlabelled
    samples; labelled ones of the same name are summed)."""
    out = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in SERIES:
            continue
        try:
            value = float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        out[name] = out.get(name, 0.0) + value
    return out


class ServerSampler:
    def __init__(self, sup, every_s, path):
        self.sup = sup
        self.every_s = every_s
        self.next_at = 0.0
        self.path = path
        with open(path, "w", newline="") as f:
            csv.writer(f).writerow(COLUMNS)

    def poll(self):
        if self.sup.t0 is None or time.monotonic() < self.next_at:
            return
        self.next_at = time.monotonic() + self.every_s
        rows = []
        for p in self.sup.role("server"):
            if not p.running or not p.metrics_port or p.stopped:
                continue
            url = f"http://{p.host.addr}:{p.metrics_port}/metrics"
            t = self.sup.elapsed()  # When the server answers (the loop may lag after).
            try:
                with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as r:
                    values = parse_metrics(r.read().decode(errors="replace"))
            except (OSError, urllib.error.URLError, ValueError):
                continue  # Starting, partitioned or gone: no sample this time.
            if SERIES[0] not in values:
                continue
            rows.append([f"{t:.3f}", p.index] +
                        [f"{values[n]:g}" if n in values else "" for n in SERIES])
        if rows:
            with open(self.path, "a", newline="") as f:
                csv.writer(f).writerows(rows)
