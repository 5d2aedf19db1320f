#!/usr/bin/env python3
"""Stress suite, across processes: for every workload rdtx-bench registers
for the stress suites (rdtx-bench --list-workloads=stress), every protocol x primitive preset of
conf/<workload> and conf/<workload>-scan (a workload with no presets of its own runs conf/smallbank's
with workload=<name>) runs as a 3-process cluster (one rdtx-bench per node,
shm between processes, true parallelism unlike the single-thread stress
test) in the workload's contended setting (the --list-workloads settings: a
small hot set), with history recording and the checks; node 0's report must
pass every check, history certified serializable included (replicas equal,
for the runs with 3-way replication). A protocol with a deadlock policy
key and several isolation levels (2PL) also runs each preset at every other
policy x level.

  RDTX_STRESS_SECONDS  measured seconds per preset (default and minimum 1)
  GTEST_TOTAL_SHARDS, GTEST_SHARD_INDEX  run every TOTAL-th run from INDEX on
                       (googletest's sharding variables, as CI sets them)
Each process gets its own lcore (node % CPUs), as deployment.md advises.
Usage: stress_multiprocess.py RDTX_BENCH CONF_DIR
"""
import glob
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import tomllib

BENCH, CONF = sys.argv[1], sys.argv[2]
# At least 1 s: each node's report must show commits in its own window.
SECONDS = str(max(1.0, float(os.environ.get("RDTX_STRESS_SECONDS", "1") or 1)))
# name -> the --set arguments of its contended setting, from the registry.
HOT = {}
for line in subprocess.run([BENCH, "--list-workloads=stress"], check=True, capture_output=True, text=True).stdout.splitlines():
    name, *settings = line.split()
    HOT[name] = [a for kv in settings for a in ("--set", kv)]
if not HOT:
    sys.exit("rdtx-bench --list-workloads=stress listed no workload")


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def presets_of(workload):
    """(preset, extra arguments) for each protocol x primitive preset the workload runs."""
    own = sorted(glob.glob(os.path.join(CONF, workload, "*.toml")))
    # ... and those of its scans (conf/ycsb-scan/: 2PL's partition locks).
    own += sorted(glob.glob(os.path.join(CONF, workload + "-scan", "*.toml")))
    if own:
        return [(p, []) for p in own]
    return [(p, ["--set", f"workload={workload}"]) for p in sorted(glob.glob(os.path.join(CONF, "smallbank", "*.toml")))]


failures = []
presets = [(w, p, x) for w in sorted(HOT) for p, x in presets_of(w)]
SEED = os.environ.get("RDTX_STRESS_SEED", "") or str(os.getpid())
ADVERSARIAL = ["--set", f"cluster.devargs=shm,read_order=random,write_order=random,seed={SEED}"]
MIXED = ["--set", "txn.protocol=occ", "--set", "txn.pipeline.fetch=onesided", "--set", "txn.pipeline.lock=rpc",
         "--set", "txn.pipeline.validate=onesided", "--set", "txn.pipeline.commit=onesided"]
runs = [(w, p, "", x) for w, p, x in presets] + [(w, p, " @ random word order", x + ADVERSARIAL) for w, p, x in presets]
runs += [(w, p, " @ lock rpc, commit one-sided", x + MIXED) for w, p, x in presets if os.path.basename(p) == "occ-onesided.toml"]
# 3-way replication, the log stage in the preset's commit primitive, under
# random word order: one-sided log entries landing in any byte order.
def replicated(p):
    log = "rpc" if os.path.basename(p).endswith("-rpc.toml") else "onesided"
    return ["--set", "cluster.replicas=3", "--set", f"txn.pipeline.log={log}"]
# Only for the protocols --list shows with a log stage (CALVIN, say, refuses it).
LISTED = subprocess.run([BENCH, "--list"], check=True, capture_output=True, text=True).stdout.splitlines()
REPLICABLE, proto = set(), None
for line in LISTED:
    if re.match(r"^  \S", line):
        proto = line.split()[0]
    elif proto and line.split()[:1] == ["log"]:
        REPLICABLE.add(proto)


def protocol_of(preset):
    with open(preset, "rb") as f:
        return tomllib.load(f).get("txn", {}).get("protocol", "")


runs += [(w, p, " @ 3 replicas, random word order", x + replicated(p) + ADVERSARIAL) for w, p, x in presets
         if protocol_of(p) in REPLICABLE]
# A protocol with a deadlock policy key (<p>.policy, --keys) and several
# isolation levels (--list): its presets also run every other policy x
# level, each checked at its level (2PL: NoWait, WaitDie, Bounded Wait at
# serializable, repeatable read and read committed).
POLICIES = {}
for line in subprocess.run([BENCH, "--keys"], check=True, capture_output=True, text=True).stdout.splitlines():
    m = re.match(r"^(\S+)\.policy\s+enum\s+\S+\s+(.+?)\s{2,}", line)
    if m:
        POLICIES[m.group(1)] = [v.strip() for v in m.group(2).split("|")]
LEVELS, proto = {}, None
for line in LISTED:
    if re.match(r"^  \S", line):
        proto = line.split()[0]
    elif proto and line.split()[:1] == ["isolation"]:
        LEVELS[proto] = [v.strip().replace(" ", "_") for v in line.split(None, 1)[1].split("(")[0].split(",")]


def own_setting(preset, section, key, default):
    with open(preset, "rb") as f:
        return tomllib.load(f).get(section, {}).get(key, default)


for w, p, x in presets:
    proto = protocol_of(p)
    if proto not in POLICIES or len(LEVELS.get(proto, [])) < 2:
        continue
    own = (own_setting(p, proto, "policy", ""), own_setting(p, "txn", "isolation", "serializable"))
    runs += [(w, p, f" @ {pol}, {lvl}", x + ["--set", f"{proto}.policy={pol}", "--set", f"txn.isolation={lvl}"])
             for pol in POLICIES[proto] for lvl in LEVELS[proto] if (pol, lvl) != own]
SHARDS = int(os.environ.get("GTEST_TOTAL_SHARDS", "1") or 1)
SHARD = int(os.environ.get("GTEST_SHARD_INDEX", "0") or 0)
if SHARDS > 1:
    runs = runs[SHARD::SHARDS]
print(f"stress-multiprocess: seed {SEED} (RDTX_STRESS_SEED); workloads {', '.join(sorted(HOT))}"
      + (f"; shard {SHARD} of {SHARDS}: {len(runs)} runs" if SHARDS > 1 else ""), flush=True)
for workload, preset, label, extra in runs:
    name = f"{workload}: {os.path.relpath(preset, CONF)}{label}"
    with tempfile.TemporaryDirectory() as tmp:
        hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(3))
        procs = []
        for n in range(3):
            cmd = [BENCH, "-l", str(n % os.cpu_count()), "--no-huge", "--no-pci", "--no-shconf", "-m", "256", "--", "-q", "--no-progress", "--no-steady-state", "--config", preset, "--node", str(n),
                   "--set", "cluster.mode=process", "--set", "cluster.nodes=3", "--set", f"cluster.hosts={hosts}",
                   "--set", "cluster.workers_per_node=1", "--duration", SECONDS, "--warmup", "0.1",
                   "--history", os.path.join(tmp, "h"), "--json", os.path.join(tmp, f"n{n}.json")] + HOT[workload] + extra
            log = open(os.path.join(tmp, f"n{n}.log"), "w")
            procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), cmd))
        rcs = []
        for p, _ in procs:
            try:
                rcs.append(p.wait(timeout=120))
            except subprocess.TimeoutExpired:
                p.kill()
                rcs.append("timeout")
        ok = all(rc == 0 for rc in rcs)
        verdict = ""
        if os.path.exists(os.path.join(tmp, "n0.json")):
            j = json.load(open(os.path.join(tmp, "n0.json")))
            verdict = j.get("history", {}).get("verdict", "")
            ok = ok and j["checks"]["passed"] and j.get("history", {}).get("certified") is True
        print(("ok    " if ok else "FAIL  ") + f"{name}: exit {rcs}, {verdict}", flush=True)
        if not ok:
            failures.append(name)
            print("rerun: " + " ".join(procs[0][1]).replace("--node 0", "--node N"))
            for n in range(3):
                print(f"--- node {n}\n" + open(os.path.join(tmp, f"n{n}.log")).read()[-2500:])

print(f"{len(failures)} of {len(runs)} failed" if failures else f"all {len(runs)} runs passed")
sys.exit(1 if failures else 0)
