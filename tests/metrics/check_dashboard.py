#!/usr/bin/python3
"""Checks deploy/grafana/shelf.json against docs/metrics.md.

  /usr/bin/python3 check_dashboard.py DASHBOARD.json METRICS.md [PROMTOOL]

Checks that the dashboard is importable JSON with a Prometheus data-source
variable that every panel uses, that panel ids are unique and panels fit the
24-column grid, that every shelf_* metric a query names is in the catalogue
of docs/metrics.md (with the right suffixes for its type), that the required
views are there, and, when PROMTOOL is given, that every query parses as
PromQL (`promtool check rules` on the queries as recording rules). Prints
each problem and exits 1 if there is any. Standard library only.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

# Grafana's variables, replaced by something PromQL accepts.
VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$node": ".*", "$instance": ".*"}

# What the dashboard must show: a view name and a regular expression one of
# the queries must match.
REQUIRED = {
    "hit ratio": r"shelf_client_prefix_hits_total.*/.*shelf_client_prefix_lookups_total",
    "master hit ratio by tier": r"shelf_master_lookup_hits_total.*/.*shelf_master_lookups_total",
    "bytes read per tier": r"sum by \(tier\) \(rate\(shelf_store_read_bytes_total",
    "bytes written per tier": r"sum by \(tier\) \(rate\(shelf_store_written_bytes_total",
    "load/store ratio": r"direction=\"load\".*/.*direction=\"store\"",
    "latency percentiles": r"histogram_quantile\(0\.99, .*shelf_master_rpc_seconds_bucket",
    "capacity per node and tier": r"by \(node, tier\) \(shelf_master_capacity_bytes",
    "used per node and tier": r"by \(node, tier\) \(shelf_master_used_bytes",
    "what DRAM holds": r"by \(node, state\) \(shelf_master_dram_bytes",
    "evictions": r"shelf_master_evictions_total",
    "demotions": r"shelf_master_demotions_total",
    "live nodes": r"shelf_master_nodes\{state=\"live\"\}",
    "leader": r"shelf_master_is_leader",
    "term": r"shelf_master_term",
}


def read_catalogue(path):
    """{name: type} from the catalogue tables of docs/metrics.md."""
    catalogue = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("| `shelf_"):
                continue
            cells = [c.strip() for c in line.split("|")]
            catalogue[cells[1].strip("`")] = cells[2]
    return catalogue


def panels_of(dashboard):
    for panel in dashboard.get("panels", []):
        yield panel
        for inner in panel.get("panels", []):
            yield inner


def check(dashboard_path, docs_path, promtool):
    problems = []
    try:
        with open(dashboard_path, encoding="utf-8") as f:
            dashboard = json.load(f)
    except (OSError, ValueError) as e:
        return ["cannot read %s: %s" % (dashboard_path, e)]
    catalogue = read_catalogue(docs_path)
    if not catalogue:
        problems.append("no catalogue rows in %s" % docs_path)

    for key in ("title", "uid", "panels", "templating", "schemaVersion"):
        if key not in dashboard:
            problems.append("dashboard has no '%s'" % key)
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if ds is None or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problems.append("no 'datasource' variable of type datasource, query prometheus")

    ids = set()
    exprs = []
    for panel in panels_of(dashboard):
        pid = panel.get("id")
        if pid in ids:
            problems.append("panel id %s used twice" % pid)
        ids.add(pid)
        grid = panel.get("gridPos", {})
        if grid.get("x", 0) + grid.get("w", 0) > 24 or grid.get("w", 0) <= 0:
            problems.append("panel '%s' does not fit the grid: %s" % (panel.get("title"), grid))
        if panel.get("type") == "row":
            continue
        if panel.get("datasource", {}).get("uid") != "${datasource}":
            problems.append("panel '%s' does not use ${datasource}" % panel.get("title"))
        targets = panel.get("targets", [])
        if not targets:
            problems.append("panel '%s' has no query" % panel.get("title"))
        for t in targets:
            if t.get("datasource", {}).get("uid") != "${datasource}":
                problems.append("a query of '%s' does not use ${datasource}" % panel.get("title"))
            exprs.append((panel.get("title"), t.get("expr", "")))
    for v in variables.values():
        if v.get("type") == "query":
            exprs.append(("variable " + v["name"], v.get("definition", "")))

    for title, expr in exprs:
        for name in re.findall(r"\bshelf_[a-z0-9_]+", expr):
            base, suffix = name, ""
            for s in ("_bucket", "_sum", "_count"):
                if name.endswith(s) and name[: -len(s)] in catalogue:
                    base, suffix = name[: -len(s)], s
            if base not in catalogue:
                problems.append("'%s' queries %s, which docs/metrics.md does not list"
                                % (title, name))
            elif catalogue[base] == "histogram" and suffix == "":
                problems.append("'%s' queries histogram %s without _bucket/_sum/_count"
                                % (title, name))
            elif catalogue[base] != "histogram" and suffix:
                problems.append("'%s' queries %s, but %s is a %s"
                                % (title, name, base, catalogue[base]))

    all_exprs = "\n".join(e for _, e in exprs)
    for view, pattern in REQUIRED.items():
        if not re.search(pattern, all_exprs):
            problems.append("no query shows %s (/%s/)" % (view, pattern))

    if promtool:
        rules = []
        for i, (_, expr) in enumerate(exprs):
            if expr.startswith("label_values("):
                continue  # a Grafana function, not PromQL
            for var, value in VARIABLES.items():
                expr = expr.replace(var, value)
            rules.append({"record": "dashboard:query_%d" % i, "expr": expr})
        # JSON is YAML, so promtool reads this file as a rules file.
        with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
            json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
            rules_path = f.name
        try:
            run = subprocess.run([promtool, "check", "rules", rules_path],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 universal_newlines=True, timeout=60)
            if run.returncode != 0:
                problems.append("promtool check rules failed:\n" + run.stdout)
        finally:
            os.unlink(rules_path)
    return problems


def main():
    if len(sys.argv) not in (3, 4):
        sys.stderr.write(__doc__)
        return 2
    problems = check(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None)
    for p in problems:
        print("PROBLEM: " + p)
    if not problems:
        print("dashboard OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
