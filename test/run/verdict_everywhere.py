#!/usr/bin/env python3
"""One verdict for a run, checked by every suite (issue 45 item 4).

The checks that decide whether a run was correct live once, in
lib/run/verdict.cpp (run::verdict()). This test shows that a check added
there is asserted by every suite that runs the engine: with
RDTX_TEST_EXTRA_CHECK set, run::verdict() appends one more check, which
always fails (as a newly added check would on a broken run). One case of
each suite is run with it, and must fail naming that check; and once
without it, and must pass (so the failure is the check's, not the case's).

Suites: the generated protocol suite, the matrix, stress, chaos and hca
suites (each through test/txn/contention.hpp's verdict_failures), rdtx-bench
(its report, exit status and JSON), and the multi-process stress suite
(rdtx-bench processes judged by their exit status).

Usage: verdict_everywhere.py BUILD_DIR SOURCE_DIR
Exit status: 0 every suite failed with the check and passed without it;
1 otherwise (each suite that did not is named).
"""

import os
import subprocess
import sys
import tempfile

build, source = sys.argv[1], sys.argv[2]
MARK = "test extra check"  # the check's label, as every suite prints it


def gtest(binary, filt, extra_env=None):
    env = dict(extra_env or {})
    return [os.path.join(build, binary), "--gtest_filter=" + filt, "--gtest_brief=1"], env


bench = os.path.join(build, "apps", "rdtx-bench", "rdtx-bench")
conf = os.path.join(source, "conf")
json_out = os.path.join(tempfile.mkdtemp(prefix="rdtx-verdict-"), "r.json")
cases = [
    ("protocols", *gtest("test/txn/test_protocols",
                         "All/ProtocolTest.UnderContentionKeepsInvariantsAndIsSerializable/smallbank_2pl_nowait_fetch_rpc")),
    ("matrix", *gtest("test/txn/test_matrix",
                      "All/MatrixTest.UnderContentionKeepsInvariantsAndIsSerializable/smallbank_2pl_nowait_fetch_rpc")),
    ("stress", *gtest("test/txn/test_stress",
                      "Stress/StressTest.SerializableWithInvariants/"
                      "ycsb_occ_fetch_onesided_lock_onesided_validate_onesided_commit_onesided",
                      {"RDTX_STRESS_SECONDS": "0.1", "RDTX_STRESS_SEED": "1"})),
    ("chaos", *gtest("test/txn/test_chaos", "Chaos/ChaosTest.NothingLostUnderFaults/smallbank_2pl_nowait_fetch_rpc_lossy")),
    ("hca", *gtest("test/txn/test_hca",
                   "Hca/HcaRun.MixedPipelinePassesEveryCheck/smallbank_nowait_fetch_rpc_commit_onesided_n2_parallel")),
    ("rdtx-bench", [bench, "-l", "0", "--no-huge", "--no-pci", "--", "-q", "--no-progress", "--config",
                    os.path.join(conf, "smallbank", "occ-onesided.toml"), "--duration", "0.5", "--warmup", "0.1",
                    "--json", json_out], {}),
    # One run of the multi-process stress suite (its runs dealt in shards:
    # a shard per run, the first).
    ("stress-multiprocess", [sys.executable, os.path.join(source, "test", "cluster", "stress_multiprocess.py"), bench, conf],
     {"GTEST_TOTAL_SHARDS": "100000", "GTEST_SHARD_INDEX": "0"}),
]

failed = []
for name, cmd, env in cases:
    for with_check in (True, False):
        e = dict(os.environ, **env)
        e.pop("RDTX_TEST_EXTRA_CHECK", None)
        if with_check:
            e["RDTX_TEST_EXTRA_CHECK"] = "1"
        p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        out = p.stdout
        if name == "rdtx-bench" and with_check and p.returncode != 0:
            # The JSON names the failed check too.
            try:
                out += open(json_out).read().replace("test_extra_check", MARK)
            except OSError:
                pass
        if with_check:
            ok = p.returncode != 0 and MARK in out
            what = "failed naming the added check" if ok else (
                f"did not fail on the added check (exit {p.returncode}, label {'seen' if MARK in out else 'not seen'})")
        else:
            ok = p.returncode == 0
            what = "passed without it" if ok else f"failed without the added check too (exit {p.returncode})"
        print(("ok    " if ok else "FAIL  ") + f"{name}: {what}", flush=True)
        if not ok:
            print("\n".join(out.splitlines()[-25:]))
            failed.append(name)

if failed:
    print("verdict_everywhere: not every suite asserts run::verdict(): " + ", ".join(sorted(set(failed))))
    sys.exit(1)
print(f"verdict_everywhere: all {len(cases)} suites fail on a check added to run::verdict() and pass without it")
