#!/usr/bin/python3
"""Runs PromQL queries against a Prometheus server's HTTP API.

  promql_check.py URL dashboard DASHBOARD.json   every query ("expr") of a Grafana
      dashboard, with its variables substituted ($__rate_interval, $__interval,
      $run = all runs); each must return at least one series with a finite value
  promql_check.py URL query EXPR [EXPR...]       each expression, printed

Exit 0 when every query returned data, 1 otherwise (each failure named on
stderr), 2 on bad usage. -q: print nothing on success.
"""
import json
import math
import sys
import urllib.error
import urllib.parse
import urllib.request

# What Grafana puts in for its built-in variables and the dashboard's own.
SUBSTITUTIONS = [
    ("$__rate_interval", "10s"),
    ("${__rate_interval}", "10s"),
    ("$__interval", "2s"),
    ("${__interval}", "2s"),
    ('=~"$run"', '=~".*"'),
]


def query(url, expr):
    """The result list of an instant query, or raises RuntimeError."""
    full = url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(full, timeout=10) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"HTTP {e.code}: {e.read().decode(errors='replace')[:300]}")
    except (urllib.error.URLError, OSError) as e:
        raise RuntimeError(f"cannot reach {url}: {e}")
    if body.get("status") != "success":
        raise RuntimeError(f"{body.get('errorType')}: {body.get('error')}")
    return body["data"]["result"]


def finite_values(result):
    out = []
    for series in result:
        try:
            v = float(series["value"][1])
        except (KeyError, IndexError, ValueError):
            continue
        if not math.isnan(v):
            out.append((series.get("metric", {}), v))
    return out


def dashboard_queries(doc):
    """Every "expr" of the dashboard, depth first, with the panel title."""
    found = []

    def walk(node, title):
        if isinstance(node, dict):
            title = node.get("title", title)
            if isinstance(node.get("expr"), str):
                found.append((title, node["expr"]))
            for v in node.values():
                walk(v, title)
        elif isinstance(node, list):
            for v in node:
                walk(v, title)

    walk(doc.get("panels", []), "")
    return found


def substitute(expr):
    for var, value in SUBSTITUTIONS:
        expr = expr.replace(var, value)
    if "$" in expr:
        raise RuntimeError(f"unknown variable left in {expr!r}")
    return expr


def main(argv):
    quiet = "-q" in argv
    argv = [a for a in argv if a != "-q"]
    if len(argv) < 4 or argv[2] not in ("dashboard", "query"):
        print(__doc__, file=sys.stderr)
        return 2
    url = argv[1]
    if argv[2] == "dashboard":
        with open(argv[3]) as f:
            queries = dashboard_queries(json.load(f))
        if not queries:
            print(f"no queries in {argv[3]}", file=sys.stderr)
            return 1
    else:
        queries = [("", e) for e in argv[3:]]
    failed = 0
    for title, expr in queries:
        try:
            result = query(url, substitute(expr))
            values = finite_values(result)
            if not values:
                raise RuntimeError(f"{len(result)} series, no finite value")
        except RuntimeError as e:
            print(f"NO DATA [{title}] {expr}: {e}", file=sys.stderr)
            failed += 1
            continue
        if not quiet:
            shown = ", ".join(
                "{" + ",".join(f'{k}="{v}"' for k, v in sorted(m.items()) if k != "__name__") +
                "}=" + format(v, ".4g") for m, v in values[:3])
            more = f" (+{len(values) - 3} more)" if len(values) > 3 else ""
            print(f"ok [{title}] {expr} -> {shown}{more}")
    if failed:
        print(f"{failed} of {len(queries)} queries returned no data", file=sys.stderr)
        return 1
    if not quiet:
        print(f"all {len(queries)} queries returned data")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
