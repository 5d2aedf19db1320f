#!/usr/bin/env python3
"""Test of scripts/rdtx-sweep. Usage: test_sweep.py RDTX_SWEEP RDTX_BENCH CONF"""

import csv
import json
import os
import subprocess
import sys
import tempfile

sweep, bench, conf = sys.argv[1:4]
failures = []


def check(cond, what):
    print(("ok      " if cond else "FAILED  ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(args):
    r = subprocess.run([sys.executable, sweep] + args, capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


grid = ["--bench", bench, "--config", conf, "--duration", "0.1", "--warmup", "0.05",
        "--vary", "txn.coroutines=1,4", "--series", "txn.pipeline.fetch=onesided,rpc"]

with tempfile.TemporaryDirectory(prefix="rdtx-sweep-test-") as tmp:
    out = os.path.join(tmp, "out")

    # --dry-run: four commands, nothing run or written.
    rc, so, se = run(["--out", out, "--dry-run"] + grid)
    lines = so.splitlines()
    check(rc == 0, f"--dry-run exits 0 (got {rc}: {se.strip()})")
    check(len(lines) == 4 and all(l.startswith(f"[{i}/4] ") for i, l in enumerate(lines, 1)),
          "--dry-run prints four numbered commands")
    check(all("--set txn.coroutines=" in l and "--json" in l and bench in l for l in lines),
          "--dry-run commands run rdtx-bench with --set and --json")
    check(not os.path.exists(out), "--dry-run writes nothing")

    # A bad --vary: one line on stderr, exit 2.
    for bad in (["--vary", "txn.coroutines=1..x"], ["--vary", "txn.coroutines"]):
        rc, so, se = run(["--out", out, "--bench", bench] + bad)
        check(rc == 2 and len(se.strip().splitlines()) == 1 and "--vary" in se,
              f"{' '.join(bad)}: exit 2 and one line on stderr (got {rc}: {se.strip()!r})")
    # A key rdtx-bench does not know fails before any run.
    rc, so, se = run(["--out", out, "--bench", bench, "--vary", "txn.coroutinez=1,2"])
    check(rc == 2 and len(se.strip().splitlines()) == 1 and "txn.coroutinez" in se,
          f"an unknown key: exit 2 and one line on stderr (got {rc}: {se.strip()!r})")
    check(not os.path.exists(os.path.join(out, "results.csv")), "an unknown key runs nothing")

    # A directory another sweep is writing is refused (its lock held here).
    import fcntl
    os.makedirs(out)
    with open(os.path.join(out, ".rdtx-sweep.lock"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        rc, so, se = run(["--out", out] + grid)
    check(rc == 2 and "another rdtx-sweep is writing" in se and not os.path.exists(os.path.join(out, "results.csv")),
          f"a directory another sweep writes: exit 2, nothing run (got {rc}: {se.strip()!r})")

    # The 2x2 grid.
    rc, so, se = run(["--out", out] + grid)
    print(so + se)
    check(rc == 0, f"the sweep exits 0 (got {rc})")
    progress = [l for l in so.splitlines() if l.startswith("[")]
    check(len(progress) == 4 and all("txn/s" in l for l in progress), "one progress line per point")
    with open(os.path.join(out, "results.csv")) as f:
        rows = list(csv.DictReader(f))
    check(len(rows) == 4, f"results.csv has 4 rows (got {len(rows)})")
    check(all(float(r["committed_per_s"]) > 0 for r in rows), "committed_per_s > 0 in every row")
    check(all(r["status"] == "ok" for r in rows), "every row's status is ok")
    for col in ("txn.coroutines", "txn.pipeline.fetch", "abort_rate", "latency_us.p50", "latency_us.p99",
                "latency_us.p999", "round_trips_per_commit", "git_revision", "config.txn.coroutines"):
        check(col in rows[0], f"results.csv has column {col}")
    check(sorted((r["txn.pipeline.fetch"], r["txn.coroutines"]) for r in rows) ==
          [("onesided", "1"), ("onesided", "4"), ("rpc", "1"), ("rpc", "4")], "the rows cover the grid")
    check(all(r["config.txn.coroutines"] == r["txn.coroutines"] for r in rows),
          "each point ran with its coroutines (the JSON's config agrees)")
    for r in rows:
        p = os.path.join(out, r["json"])
        ok = os.path.exists(p)
        if ok:
            with open(p) as f:
                ok = json.load(f).get("tool") == "rdtx-bench"
        check(ok, f"point JSON {r['json']} exists and is rdtx-bench's")
    with open(os.path.join(out, "sweep.json")) as f:
        doc = json.load(f)
    check(len(doc["points"]) == 4 and doc["finished"], "sweep.json lists 4 points, finished")
    check(doc["spec"]["vary"] == {"txn.coroutines": ["1", "4"]}, "sweep.json holds the spec")

    plotted = "plots skipped" not in so
    if plotted:
        for png in ("throughput.png", "latency.png", "abort_rate.png"):
            p = os.path.join(out, png)
            with open(p, "rb") as f:
                magic = f.read(8)
            check(magic == b"\x89PNG\r\n\x1a\n" and os.path.getsize(p) > 5000, f"{png} is a PNG")
        os.unlink(os.path.join(out, "throughput.png"))
        rc, so, se = run(["--out", out, "--plot-only"])
        check(rc == 0 and os.path.exists(os.path.join(out, "throughput.png")), "--plot-only redraws the plots")
    else:
        print("matplotlib not found: PNG checks skipped")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed")
