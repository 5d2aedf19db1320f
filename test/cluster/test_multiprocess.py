#!/usr/bin/env python3
"""One process per node on this host: rdtx-bench --node N with the shm driver.

  1. A 3-process SmallBank cluster with history recording: every process
     exits 0; node 0's JSON covers the cluster (3 nodes' figures), its
     checks pass (money invariant, locks, RPC) and the history the three
     processes wrote is certified serializable.
  2. A configuration that differs on one node: every process exits 2 and
     names the key.
  3. A node killed during the run: the others end with an error naming it,
     within a bounded time.
  4. SIGTERM to node 0 during the run: every process exits 1 with
     "node 0 (host:port) stopped by SIGTERM", within a bounded time, and
     none reports a barrier timeout instead.
  5. Bad command lines: --node without process mode, process mode without
     --node, a node id out of range, a bad cluster.hosts.
  6. SIGINT: to one node of a process cluster, every node exits 1 naming
     it; that node reports no figures, the others report their own up to
     then (aggregate false, the check `cluster` failed naming it: a run cut
     short by a lost peer, doc/rdtx-bench.md); to an embedded run, the report covers the
     seconds the coordinators ran (not the 30 s asked for, nor the time they
     took to stop).
  7. The split layout (cluster.memory_nodes = 1): node 0 holds the data and
     runs no coordinator, nodes 1 and 2 coordinate and hold no partition. A
     TPC-C run (its inserts and erases go to node 0's process by RPC) with
     history recording: every process exits 0, node 0's report gives each
     node's role, node 0 committed nothing and each compute node something,
     the consistency conditions hold and the history is certified.
Usage: test_multiprocess.py RDTX_BENCH
"""
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

BENCH = sys.argv[1]
FAILS = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def hosts(n):
    return ",".join(f"127.0.0.1:{p}" for p in free_ports(n))


def start(node, args, tmp):
    log = open(os.path.join(tmp, f"node{node}.log"), "w")
    # Each process on its own CPU where there are enough (deployment.md).
    eal = ["-l", str(node % os.cpu_count()), "--no-huge", "--no-pci", "--no-shconf", "-m", "256"]
    cmd = [BENCH] + eal + ["--", "-q", "--no-progress", "--node", str(node)] + args
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log


def read(tmp, node):
    with open(os.path.join(tmp, f"node{node}.log")) as f:
        return f.read()


def signal_when_running(tmp, procs, node, sig, watch=None):
    """Sends `sig` to `node` about a second into the run (seen in node `watch`'s log)."""
    deadline = time.time() + 30
    while time.time() < deadline and "smallbank on" not in read(tmp, node if watch is None else watch):
        time.sleep(0.1)
    time.sleep(1.0)
    procs[node][0].send_signal(sig)


def wait_all(procs, timeout=15):
    """Every process's exit status (None: killed after `timeout` s)."""
    rcs = []
    for p, _ in procs:
        try:
            rcs.append(p.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            p.kill()
            rcs.append(None)
    return rcs


def cluster_args(n, h, extra=()):
    return ["--set", "cluster.mode=process", "--set", f"cluster.nodes={n}", "--set", f"cluster.hosts={h}",
            "--set", "cluster.connect_timeout_s=20"] + list(extra)


def run_ok(tmp):
    h = hosts(3)
    hist = os.path.join(tmp, "history")
    procs = []
    for n in range(3):
        extra = ["--duration", "1", "--warmup", "0.2", "--history", hist, "--json", os.path.join(tmp, f"n{n}.json"),
                 "--set", "smallbank.accounts_per_node=2000", "--set", "smallbank.hot_accounts_per_node=20",
                 # two workers per node (each its own device context, so table
                 # descriptors are exchanged per worker) and two RC QPs per
                 # node pair: the exchange carries every lane's address
                 "--set", "cluster.workers_per_node=2", "--set", "cluster.qps_per_node=2"]
        procs.append(start(n, cluster_args(3, h, extra), tmp))
    rcs = [p.wait(timeout=120) for p, _ in procs]
    for n, rc in enumerate(rcs):
        check(rc == 0, f"3 processes: node {n} exits 0 (got {rc})")
        if rc != 0:
            print(read(tmp, n)[-3000:])
    j = json.load(open(os.path.join(tmp, "n0.json")))
    check(j["aggregate"] is True and j["node"] == 0, "node 0's report is the cluster's")
    check(len(j["per_node"]) == 3 and all(p["committed"] > 0 for p in j["per_node"]),
          "node 0 has every node's commits")
    check(j["checks"]["passed"] is True, "node 0: every check passed")
    check(j["checks"]["invariants"]["ok"] is True, "money invariant across the processes")
    check(j["history"]["certified"] is True, f"history across processes certified: {j['history'].get('verdict')}")
    files = sorted(os.listdir(hist))
    check(files == [f"history-n{n}-w{w}.rdtxh" for n in range(3) for w in range(2)],
          f"one history file per worker: {files}")
    j1 = json.load(open(os.path.join(tmp, "n1.json")))
    check(j1["aggregate"] is False and j1["node"] == 1 and j1["committed"] > 0, "node 1's own report")
    check(j1["committed"] < j["committed"], "node 0's total exceeds node 1's own")


def run_split(tmp):
    h = hosts(3)
    hist = os.path.join(tmp, "history")
    procs = []
    for n in range(3):
        extra = ["--duration", "1", "--warmup", "0.2", "--history", hist, "--json", os.path.join(tmp, f"n{n}.json"),
                 "--set", "cluster.memory_nodes=1", "--set", "workload=tpcc",
                 "--set", "tpcc.warehouses_per_node=4", "--set", "tpcc.customers_per_district=30",
                 "--set", "tpcc.items=1000", "--set", "tpcc.order_capacity=1000"]
        procs.append(start(n, cluster_args(3, h, extra), tmp))
    rcs = [p.wait(timeout=120) for p, _ in procs]
    for n, rc in enumerate(rcs):
        check(rc == 0, f"split layout: node {n} exits 0 (got {rc})")
        if rc != 0:
            print(read(tmp, n)[-3000:])
    j = json.load(open(os.path.join(tmp, "n0.json")))
    roles = [p.get("role") for p in j["per_node"]]
    check(roles == ["memory", "compute", "compute"], f"split layout: each node's role in node 0's report: {roles}")
    committed = [p["committed"] for p in j["per_node"]]
    check(committed[0] == 0 and committed[1] > 0 and committed[2] > 0,
          f"split layout: the memory node committed nothing, each compute node something: {committed}")
    check(j["checks"]["passed"] is True, "split layout: every check passed")
    check(j["checks"]["invariants"]["ok"] is True and j["checks"]["insert_errors"]["value"] == 0,
          "split layout: TPC-C's consistency conditions, no insert error")
    check(j["history"]["certified"] is True, f"split layout: history certified: {j['history'].get('verdict')}")
    check(sorted(os.listdir(hist)) == [f"history-n{n}-w0.rdtxh" for n in range(3)],
          f"split layout: one history file per worker: {sorted(os.listdir(hist))}")


def run_mismatch(tmp):
    h = hosts(3)
    procs = []
    for n in range(3):
        extra = ["--duration", "1"] + (["--set", "txn.coroutines=4"] if n == 2 else [])
        procs.append(start(n, cluster_args(3, h, extra), tmp))
    rcs = [p.wait(timeout=60) for p, _ in procs]
    for n, rc in enumerate(rcs):
        out = read(tmp, n)
        check(rc == 2 and "txn.coroutines" in out and "node 2" in out,
              f"config mismatch: node {n} exits 2 naming txn.coroutines and node 2 (rc {rc})")


def shm_segments():
    return set(glob.glob("/dev/shm/rdtx.rdtx-run-*"))


def start_long_cluster(tmp, per_node=lambda n: []):
    """Three node processes running a 30 s SmallBank run; their ports and processes."""
    ports = free_ports(3)
    h = ",".join(f"127.0.0.1:{p}" for p in ports)
    procs = [start(n, cluster_args(3, h, ["--duration", "30", "--warmup", "0.1"] + per_node(n)), tmp)
             for n in range(3)]
    return ports, procs


def run_killed(tmp):
    before = shm_segments()
    _, procs = start_long_cluster(tmp)
    signal_when_running(tmp, procs, 2, signal.SIGKILL, watch=0)
    t = time.time()
    rcs = wait_all(procs[:2])
    took = time.time() - t
    for n in range(2):
        out = read(tmp, n)
        check(rcs[n] == 1 and "node 2" in out, f"node 2 killed: node {n} exits 1 naming node 2 (rc {rcs[n]})")
    check(took < 10, f"the survivors stopped within 10 s ({took:.1f} s)")
    procs[2][0].wait()
    # The killed node could not remove its shared memory; nobody else will
    # open that run's fabric again.
    for path in shm_segments() - before:
        os.unlink(path)


def run_sigterm(tmp):
    before = shm_segments()
    ports, procs = start_long_cluster(tmp)
    signal_when_running(tmp, procs, 0, signal.SIGTERM)
    t = time.time()
    rcs = wait_all(procs)
    took = time.time() - t
    want = f"node 0 (127.0.0.1:{ports[0]}) stopped by SIGTERM"
    for n in range(3):
        out = read(tmp, n)
        check(rcs[n] == 1 and want in out, f"SIGTERM to node 0: node {n} exits 1 with '{want}' (rc {rcs[n]})")
        check("did not reach barrier" not in out and "did not complete barrier" not in out,
              f"SIGTERM to node 0: node {n} reports no barrier timeout")
        if rcs[n] != 1 or want not in out:
            print(out[-2000:])
    check(took < 10, f"every node stopped within 10 s of the signal ({took:.1f} s)")
    for path in shm_segments() - before:
        os.unlink(path)


def run_sigint(tmp):
    before = shm_segments()
    jsons = [os.path.join(tmp, f"node{n}.json") for n in range(3)]
    ports, procs = start_long_cluster(tmp, lambda n: ["--json", jsons[n]])
    signal_when_running(tmp, procs, 1, signal.SIGINT)
    rcs = wait_all(procs)
    want = f"node 1 (127.0.0.1:{ports[1]}) stopped by SIGINT"
    for n in range(3):
        out = read(tmp, n)
        check(rcs[n] == 1 and want in out, f"SIGINT to node 1: node {n} exits 1 with '{want}' (rc {rcs[n]})")
        if n == 1:
            check(not os.path.exists(jsons[n]), "SIGINT to node 1: node 1 writes no JSON report")
            continue
        # The others: their own figures, the run cut short naming node 1.
        try:
            with open(jsons[n]) as f:
                r = json.load(f)
        except (OSError, ValueError):
            r = {}
        cl = r.get("checks", {}).get("cluster", {})
        check(r.get("aggregate") is False and cl.get("ok") is False and want in cl.get("message", ""),
              f"SIGINT to node 1: node {n} reports its own figures, the check cluster failed naming node 1")
    for path in shm_segments() - before:
        os.unlink(path)

    # Embedded: interrupted ~1 s into a 30 s window (once its progress line
    # shows the measured window has begun: under a sanitizer on a busy
    # machine start-up alone can take seconds).
    out_json = os.path.join(tmp, "embedded.json")
    log_path = os.path.join(tmp, "embedded.log")
    log = open(log_path, "w")
    p = subprocess.Popen([BENCH, "-l", "0", "--no-huge", "--no-pci", "--no-shconf", "-m", "256", "--", "-q",
                          "--set", "run.progress_s=0.5", "--duration", "30", "--warmup", "0.2", "--json", out_json],
                         stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None and "measured" not in open(log_path).read():
        time.sleep(0.1)
    time.sleep(0.5)
    t = time.time()
    p.send_signal(signal.SIGINT)
    rc = p.wait(timeout=30)
    took = time.time() - t
    log.close()
    try:
        with open(out_json) as f:
            r = json.load(f)
    except (OSError, ValueError):
        r = {}
    secs = r.get("seconds", -1)
    check(rc == 0 and r.get("interrupted") is True, f"SIGINT to an embedded run: exit 0, report marked interrupted (rc {rc})")
    check(0 < secs < 2.5, f"SIGINT to an embedded run: {secs} measured seconds (it ran ~1 s of 30, stopped in {took:.1f} s)")


def run_bad_command_lines(tmp):
    def rc_of(args):
        p = subprocess.run([BENCH, "--", "-q"] + args, capture_output=True, text=True, timeout=30)
        return p.returncode, p.stderr

    rc, err = rc_of(["--node", "1"])
    check(rc == 2 and "--node needs cluster.mode" in err, f"--node without process mode: {err.strip()}")
    h = hosts(2)
    rc, err = rc_of(cluster_args(2, h))
    check(rc == 2 and "needs --node" in err, f"process mode without --node: {err.strip()}")
    rc, err = rc_of(cluster_args(2, h, ["--node", "2"]))
    check(rc == 2 and "not below cluster.nodes" in err, f"node id out of range: {err.strip()}")
    rc, err = rc_of(cluster_args(2, "127.0.0.1:7000,localhost", ["--node", "0"]))
    check(rc == 2 and "cluster.hosts" in err and "host:port" in err, f"bad cluster.hosts: {err.strip()}")
    rc, err = rc_of(cluster_args(3, h, ["--node", "0"]))
    check(rc == 2 and "lists 2 node(s)" in err, f"hosts and nodes disagree: {err.strip()}")


with tempfile.TemporaryDirectory() as tmp:
    for case in (run_ok, run_split, run_mismatch, run_killed, run_sigterm, run_sigint, run_bad_command_lines):
        d = os.path.join(tmp, case.__name__)
        os.mkdir(d)
        case(d)

print(f"{len(FAILS)} failed" if FAILS else "all passed")
sys.exit(1 if FAILS else 0)
