#!/usr/bin/env python3
"""Smoke tests of shelf-bench (docs/benchmarks.md).

    bench_smoke.py SHELF_BENCH SUBCOMMAND   run SUBCOMMAND --quick (master-stores,
                                            replay_compare: see ARGS); check that it
                                            prints a table, then a JSON object
                                            with the subcommand's figures as its
                                            last line, and reports no errors
    bench_smoke.py SHELF_BENCH --stop       start `kv --quick`, SIGTERM it while
                                            it runs; check that it still prints
                                            its JSON line and that every process
                                            it started is gone

Figures are not judged: a smoke test on a shared machine checks that each
bench runs end to end, not how fast.
"""
import json
import os
import signal
import subprocess
import sys
import time

# The fields each subcommand must report (numbers; null only where noted).
REQUIRED = {
    "kv": ["tcp_vs_redis_min", "shm_vs_redis_min", "errors", "mismatches", "rows"],
    "transport": ["tcp_ratio_1m", "tcp_ratio_16m", "shm_ratio_1m", "shm_ratio_16m",
                  "errors", "mismatches", "rows"],
    "ssd": ["write_ratio_4m", "read_ratio_4m", "kv_compression_disk_ratio", "mismatches"],
    "ssd-hits": ["256k_shm_get_gbps", "256k_tcp_get_gbps", "1024k_shm_get_gbps",
                 "1024k_tcp_get_gbps", "errors", "mismatches"],
    "master": ["lookups_per_s_1t", "grpc_matchprefix_keys_per_s_b64",
               "bytes_per_object_10m", "errors"],
    "master-stores": ["heartbeat_p99_ms", "heartbeat_held_p99_ms", "lookup_keys_per_s",
                      "matchprefix_p99_ms", "puts_per_s", "master_cpu_s_per_s",
                      "master_rss_bytes", "errors"],
    "replay_compare": ["put_gbps_ratio", "put_p99_ratio", "get_gbps_ratio", "raw_write_gbps",
                       "put_goal_gbps", "put_goal_ratio", "errors", "mismatches"],
    "kv-events-router-view": ["map_placed_pct", "array_placed_pct"],
    "resp": ["resp_get_1m_vs_redis", "resp_set_1m_vs_redis", "resp_get_64k_vs_redis",
             "resp_min_vs_redis", "redis_benchmark_get_min_vs_redis", "errors", "mismatches",
             "rows", "redis_benchmark_rows"],
}
# Subcommands run with other arguments than `SUBCOMMAND --quick`.
ARGS = {
    "master-stores": ["master", "--stores", "20", "--quick"],
    # Both sides twice, on a small DRAM and SSD that fill (demotions, SSD
    # drops), and the raw write row.
    # A small trace replay that fills the stores' DRAM (evictions), both
    # encodings followed.
    "kv-events-router-view": ["kv-events", "--router-view", "--requests", "300",
                              "--dram-size", "8MiB"],
    # The checked load's quick rows, then redis-benchmark's four GET rows
    # of 64 KiB, 2000 requests each.
    "resp": ["resp", "--quick", "--redis-benchmark", "--redis-benchmark-sizes", "64KiB",
             "--redis-benchmark-bytes", "64MiB"],
    "replay_compare": ["replay", "--compare-dram-only", "--rounds", "2", "--requests", "150",
                       "--block-bytes", "32KiB", "--dram-size", "8MiB", "--ssd-size", "24MiB"],
}
TIMEOUT_S = 110


def fail(msg, out=""):
    sys.stderr.write(out[-4000:] + "\n")
    sys.exit("FAIL: " + msg)


def last_json(out):
    lines = [l for l in out.splitlines() if l.strip()]
    if not lines:
        fail("no output")
    try:
        obj = json.loads(lines[-1])
    except ValueError as e:
        fail("last line is not JSON: %s" % e, out)
    return obj, lines


def run_quick(bench, sub):
    t0 = time.time()
    args = ARGS.get(sub, [sub, "--quick"])
    p = subprocess.run([bench] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=TIMEOUT_S)
    elapsed = time.time() - t0
    obj, lines = last_json(p.stdout)
    if len(lines) < 3:
        fail("no table before the JSON line", p.stdout)
    if obj.get("bench") != sub:
        fail("JSON names bench %r" % obj.get("bench"), p.stdout)
    for field in REQUIRED[sub]:
        if field not in obj:
            fail("JSON lacks %r" % field, p.stdout)
    numbers = [f for f in REQUIRED[sub]
               if f not in ("rows", "redis_benchmark_rows", "errors", "mismatches")]
    if sub == "kv" and not obj.get("redis"):
        # The ratios are null without a baseline: a smoke test that passed
        # then would check no comparison at all.
        fail("kv ran without its Redis baseline: install redis-server and libhiredis-dev "
             "(deploy/install-deps.sh does)", p.stdout)
    for field in numbers:
        if not isinstance(obj[field], (int, float)) or obj[field] <= 0:
            fail("%s = %r, want a positive number" % (field, obj[field]), p.stdout)
    for field in ("errors", "mismatches"):
        if obj.get(field, 0) != 0:
            fail("%s = %r" % (field, obj[field]), p.stdout + p.stderr)
    if obj.get("error"):
        fail("error: %s" % obj["error"], p.stdout)
    # What a router following the stream knows is a correctness count, not
    # a speed: every block where it is, no entry for one that is gone.
    for field in ("map_missed", "map_stale", "array_missed", "array_stale"):
        if field in obj and obj[field] != 0:
            fail("%s = %r, want 0" % (field, obj[field]), p.stdout)
    # Neither RESP server always runs first: the rows take turns.
    if sub == "resp" and {r.get("first") for r in obj["rows"]} != {"redis", "shelf"}:
        fail("resp rows do not alternate which server goes first", p.stdout)
    if sub == "resp" and len(obj["redis_benchmark_rows"]) != 4:
        fail("resp ran %d redis-benchmark rows, want 4 (-c 4, 32 x -P 1, 16)"
             % len(obj["redis_benchmark_rows"]), p.stdout)
    if p.returncode != 0:
        fail("exit status %d" % p.returncode, p.stdout + p.stderr)
    print("%s --quick: ok in %.1f s" % (sub, elapsed))


def children_of(pid):
    kids = set()
    for task in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                kids.update(int(x) for x in f.read().split())
        except OSError:
            pass
    return kids


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def run_stop(bench):
    p = subprocess.Popen([bench, "kv", "--quick", "--seconds", "1"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    # Wait until the cluster (and Redis) are up and rows are running.
    kids = set()
    deadline = time.time() + 30
    while time.time() < deadline and p.poll() is None:
        kids = children_of(p.pid)
        if len(kids) >= 3:  # master, two stores (and redis-server)
            break
        time.sleep(0.2)
    if len(kids) < 3:
        p.kill()
        fail("kv did not start its processes (children: %s)" % sorted(kids))
    time.sleep(3)
    p.send_signal(signal.SIGTERM)
    try:
        out, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        fail("kv did not stop within 60 s of SIGTERM")
    obj, _ = last_json(out)
    if not obj.get("stopped"):
        fail("JSON does not say it stopped", out)
    time.sleep(0.5)
    left = [k for k in kids if alive(k)]
    if left:
        for k in left:
            os.kill(k, signal.SIGKILL)
        fail("processes left running after SIGTERM: %s" % left)
    print("kv stopped on SIGTERM with its JSON line; %d child processes gone" % len(kids))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    bench, what = sys.argv[1], sys.argv[2]
    if what == "--stop":
        run_stop(bench)
    elif what in REQUIRED:
        run_quick(bench, what)
    else:
        sys.exit("unknown subcommand %r" % what)


if __name__ == "__main__":
    main()
