#!/usr/bin/env python3
"""The presets of one workload (conf/<workload>/*.toml) run it the same way:
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
for d in sorted(glob.glob(os.path.join(CONF, "*", ""))):
    workload = os.path.basename(os.path.dirname(d))
    tables = {}
    for p in sorted(glob.glob(os.path.join(d, "*.toml"))):
        with open(p, "rb") as f:
            doc = tomllib.load(f)
        if doc.get("workload") == workload:
            tables[os.path.relpath(p, CONF)] = doc.get(workload, {})
    if not tables:
        continue
    ref_name, ref = next(iter(tables.items()))
    for name, t in tables.items():
        for k in sorted(set(ref) | set(t)):
            if ref.get(k) != t.get(k):
                bad.append(f"{name}: {workload}.{k} = {t.get(k)!r}, but {ref_name} has {ref.get(k)!r}")
    print(f"{workload}: {len(tables)} presets agree" if not bad else f"{workload}: checked {len(tables)}")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
