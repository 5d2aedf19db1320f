#!/usr/bin/env python3
"""The presets of one workload in one directory (conf/<workload>/*.toml,
conf/tpcc-no/, conf/emulations/<workload>/) run it the same way:
every key of the workload's own table ([smallbank], [ycsb]...) has the same
value in each, so that comparing presets compares protocols and primitives,
not workload settings (a preset that kept an old hot-set meaning made
"RCC's settings" untrue once). Usage: presets_agree.py CONF_DIR"""
import glob
import os
import sys
import tomllib

CONF = sys.argv[1]
bad = []
# Every directory of presets (conf/<workload>/, conf/tpcc-no/, conf/emulations/<workload>/),
# its presets grouped by the workload they run.
for d in sorted({os.path.dirname(p) for p in glob.glob(os.path.join(CONF, "**", "*.toml"), recursive=True)}):
    groups = {}
    for p in sorted(glob.glob(os.path.join(d, "*.toml"))):
        with open(p, "rb") as f:
            doc = tomllib.load(f)
        workload = doc.get("workload")
        if workload:
            groups.setdefault(workload, {})[os.path.relpath(p, CONF)] = doc.get(workload, {})
    for workload, tables in groups.items():
        ref_name, ref = next(iter(tables.items()))
        before = len(bad)
        for name, t in tables.items():
            for k in sorted(set(ref) | set(t)):
                if ref.get(k) != t.get(k):
                    bad.append(f"{name}: {workload}.{k} = {t.get(k)!r}, but {ref_name} has {ref.get(k)!r}")
        where = os.path.relpath(d, CONF)
        print(f"{where} ({workload}): {len(tables)} presets agree" if len(bad) == before else f"{where} ({workload}): checked {len(tables)}")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
