#!/usr/bin/env python3
"""Test of the experiment specs and scripts/rcc-compare.
Usage: test_reproduce.py RDTX_SWEEP RDTX_BENCH RCC_COMPARE REPO

1. Every spec in conf/sweeps/ and conf/reproduce/ expands (rdtx-sweep
   --dry-run) to rdtx-bench command lines that rdtx-bench accepts
   (--print-config): a key the workload does not have, a value out of range
   or a preset that does not exist fails here, not an hour into a sweep.
2. rcc-compare puts a sweep's results beside RCC's figures: the RCC cells
   are the reference CSV's, the rdtx cells and ratios the results'.
"""

import csv
import glob
import os
import shlex
import subprocess
import sys
import tempfile

sweep, bench, compare, repo = sys.argv[1:5]
bench = os.path.abspath(bench)  # meson passes it relative to the build directory; the runs are in the repo
failures = []


def check(cond, what):
    print(("ok      " if cond else "FAILED  ") + what, flush=True)
    if not cond:
        failures.append(what)


specs = sorted(glob.glob(os.path.join(repo, "conf", "sweeps", "*.sweep")) +
               glob.glob(os.path.join(repo, "conf", "reproduce", "*.sweep")))
check(len(specs) >= 10, f"{len(specs)} specs found")
for spec in specs:
    name = os.path.relpath(spec, repo)
    r = subprocess.run([sys.executable, sweep, "--bench", bench, "--out", "/nonexistent-dry-run", "--spec", spec,
                        "--dry-run"], capture_output=True, text=True, cwd=repo)
    if r.returncode != 0:
        check(False, f"{name}: --dry-run exits 0 (got {r.returncode}: {r.stderr.strip()})")
        continue
    seen, bad = set(), []
    for line in r.stdout.splitlines():
        argv = shlex.split(line.split("] ", 1)[1])
        args = argv[argv.index("--") + 1:]
        if "--json" in args:
            i = args.index("--json")
            del args[i:i + 2]
        key = tuple(args)
        if key in seen:
            continue
        seen.add(key)
        p = subprocess.run([bench, "--"] + args + ["--print-config"], capture_output=True, text=True, cwd=repo)
        if p.returncode != 0:
            bad.append(f"{' '.join(args)}: {p.stderr.strip()[:300]}")
    check(not bad and seen, f"{name}: rdtx-bench accepts its {len(seen)} configurations" +
          (f" (first refused: {bad[0]})" if bad else ""))

# rcc-compare on a made-up sweep of two protocols.
with tempfile.TemporaryDirectory(prefix="rcc-compare-test-") as tmp:
    with open(os.path.join(tmp, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["point", "status", "config", "committed_per_s", "abort_rate"])
        w.writerow(["1", "ok", "conf/smallbank/occ-rpc.toml", "10000000", "0.05"])
        w.writerow(["2", "ok", "conf/smallbank/occ-onesided.toml", "15000000", "0.02"])
        w.writerow(["3", "failed", "conf/smallbank/mvcc-rpc.toml", "1", "0.5"])
    r = subprocess.run([sys.executable, compare, tmp, "fig15-edr", "bank"], capture_output=True, text=True)
    check(r.returncode == 0, f"rcc-compare exits 0 (got {r.returncode}: {r.stderr.strip()})")
    rows = {l.split("|")[1].strip(): [c.strip() for c in l.split("|")[1:-1]]
            for l in r.stdout.splitlines() if l.startswith("| ") and not l.startswith("| protocol")}
    ref = {(x["alg"], x["version"]): x for x in csv.DictReader(open(os.path.join(repo, "doc", "reproduction",
                                                                                    "rcc-vldb20.csv")))
           if x["experiment"] == "fig15-edr" and x["app"] == "bank"}
    occ = rows.get("occ")
    check(occ is not None, "rcc-compare prints an occ row")
    if occ:
        check(occ[1] == f"{float(ref[('occ', 'rpc')]['throughput_mtps']):.3g}" and
              occ[2] == f"{float(ref[('occ', 'onesided')]['throughput_mtps']):.3g}",
              f"occ: RCC's cells are the reference CSV's ({occ[1]}, {occ[2]})")
        check(occ[4:7] == ["10", "15", "1.50"], f"occ: rdtx's cells are the results' and their ratio ({occ[4:7]})")
        check(occ[8] == "5.0% / 2.0%", f"occ: rdtx's abort rates ({occ[8]})")
    mvcc = rows.get("mvcc")
    check(mvcc is not None and mvcc[4] == "-", "a failed run is left out (mvcc RPC: -)")
    r = subprocess.run([sys.executable, compare, tmp, "fig99", "bank"], capture_output=True, text=True)
    check(r.returncode != 0 and "no rows" in r.stderr, "an unknown experiment is refused with a message")

# rcc-compare fig21: the stage times beside RCC's Figure 21.
with tempfile.TemporaryDirectory(prefix="rcc-compare-test-") as tmp:
    with open(os.path.join(tmp, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["point", "status", "config", "stages_us.fetch.mean", "stages_us.lock.mean", "latency_us.mean"])
        w.writerow(["1", "ok", "conf/smallbank/sundial-onesided.toml", "4.5", "3.25", "12"])
    r = subprocess.run([sys.executable, compare, tmp, "fig21", "bank"], capture_output=True, text=True)
    check(r.returncode == 0, f"rcc-compare fig21 exits 0 (got {r.returncode}: {r.stderr.strip()})")
    rows = {tuple(c.strip() for c in l.split("|")[1:3]): [c.strip() for c in l.split("|")[1:-1]]
            for l in r.stdout.splitlines() if l.startswith("| ") and not l.startswith("| protocol")}
    ref = {(x["alg"], x["version"]): x for x in csv.DictReader(open(os.path.join(repo, "doc", "reproduction",
                                                                                    "rcc-vldb20-fig21.csv")))}
    sd = rows.get(("sundial", "onesided"))
    check(sd is not None and len(rows) == 10, f"fig21: a row per protocol and version, sundial one-sided among them "
          f"({len(rows)} rows)")
    if sd:
        want = ref[("sundial", "onesided")]
        check(sd[2] == f"{float(want['read_us']):.3g}" and sd[6] == f"{float(want['renew_us']):.3g}",
              f"fig21: RCC's Read and Renew are the reference CSV's ({sd[2]}, {sd[6]})")
        check(sd[3] == "4.5" and sd[5] == "3.25" and sd[13] == "12", f"fig21: rdtx's cells are the results' ({sd})")
    nw = rows.get(("nowait", "rpc"))
    check(nw is not None and nw[2] == "-" and nw[3] == "-",
          "fig21: RCC's 0 (no Read stage for RPC NOWAIT) and a missing rdtx run print -")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
