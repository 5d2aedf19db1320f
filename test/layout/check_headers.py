#!/usr/bin/env python3
"""Public and internal headers of lib/ (issue 45 item 6; doc/architecture.md
"Public and internal headers").

Each lib/<component>/meson.build lists its headers in three kinds, as DPDK
lists `headers` apart from `indirect_headers`:

  public    what cc/, workloads/, apps/ and drivers/ may include
  indirect  included by public headers; nothing outside lib/ includes one
  internal  the component's own: its sources, lib/, and white-box tests

Checks, naming the file and line of every violation:
  1. every header under lib/ is listed, in exactly one kind, and every
     listed header exists;
  2. a public or indirect header includes no internal header (else the
     internal one leaks to every user);
  3. cc/, workloads/, apps/ and drivers/ include only public headers of
     lib/ (tests may include anything).
Before checking the tree it runs the same checks on made-up trees that
break each rule, and fails if any of them passes (--no-self-test skips it).

Usage: check_headers.py --source DIR --public H... --indirect H... --internal H...
"""
import argparse
import os
import re
import sys
import tempfile

USERS = ["cc", "workloads", "apps", "drivers"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield n, m.group(1)


def check(source, public, indirect, internal):
    """Returns the violations, one line each."""
    errors = []
    lib = os.path.join(source, "lib")
    kinds = {}
    for kind, names in (("public", public), ("indirect", indirect), ("internal", internal)):
        for h in names:
            if h in kinds:
                errors.append(f"lib/{h}: listed as {kinds[h]} and as {kind} (lib/{h.split('/')[0]}/meson.build)")
            kinds[h] = kind
            if not os.path.isfile(os.path.join(lib, h)):
                errors.append(f"lib/{h}: listed as {kind} in lib/{h.split('/')[0]}/meson.build, but there is no such file")
    on_disk = set()
    for d, _, files in os.walk(lib):
        for f in files:
            if f.endswith(".hpp"):
                on_disk.add(os.path.relpath(os.path.join(d, f), lib))
    for h in sorted(on_disk - set(kinds)):
        errors.append(f"lib/{h}: not in headers, indirect_headers or internal_headers of lib/{h.split('/')[0]}/meson.build")
    # 2: no internal header behind a public or indirect one.
    for h in sorted(on_disk):
        if kinds.get(h) not in ("public", "indirect"):
            continue
        for n, inc in includes(os.path.join(lib, h)):
            if kinds.get(inc) == "internal":
                errors.append(f"lib/{h}:{n}: a {kinds[h]} header includes internal header {inc}")
    # 3: users include public headers only.
    for top in USERS:
        base = os.path.join(source, top)
        for d, _, files in os.walk(base):
            for f in sorted(files):
                if not f.endswith((".hpp", ".cpp", ".h", ".cc")):
                    continue
                p = os.path.join(d, f)
                for n, inc in includes(p):
                    kind = kinds.get(inc)
                    if kind in ("indirect", "internal"):
                        errors.append(f"{os.path.relpath(p, source)}:{n}: includes {inc}, an {kind} header of lib/"
                                      f"{inc.split('/')[0]} (use its public headers)")
                    elif inc.startswith("lib/"):
                        errors.append(f"{os.path.relpath(p, source)}:{n}: includes {inc}: name lib/ headers as "
                                      f"component/header.hpp")
    return errors


def self_test():
    """Each rule broken on a made-up tree must be reported."""
    cases = [
        # (files: path -> includes, public, indirect, internal, expected text)
        ({"lib/a/p.hpp": [], "lib/a/i.hpp": [], "cc/x/x.cpp": ["a/i.hpp"]}, ["a/p.hpp"], [], ["a/i.hpp"],
         "an internal header of lib/a"),
        ({"lib/a/p.hpp": ["a/q.hpp"], "lib/a/q.hpp": [], "workloads/w/w.cpp": ["a/q.hpp"]}, ["a/p.hpp"],
         ["a/q.hpp"], [], "an indirect header of lib/a"),
        ({"lib/a/p.hpp": ["a/i.hpp"], "lib/a/i.hpp": []}, ["a/p.hpp"], [], ["a/i.hpp"],
         "a public header includes internal header a/i.hpp"),
        ({"lib/a/p.hpp": [], "lib/a/new.hpp": []}, ["a/p.hpp"], [], [], "lib/a/new.hpp: not in headers"),
        ({"lib/a/p.hpp": []}, ["a/p.hpp", "a/gone.hpp"], [], [], "there is no such file"),
        ({"lib/a/p.hpp": []}, ["a/p.hpp"], [], ["a/p.hpp"], "listed as public and as internal"),
    ]
    ok = True
    for files, pub, ind, inn, want in cases:
        with tempfile.TemporaryDirectory() as root:
            for path, incs in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
                with open(os.path.join(root, path), "w") as f:
                    f.writelines(f'#include "{i}"\n' for i in incs)
            errs = check(root, pub, ind, inn)
            if not any(want in e for e in errs):
                print(f"self-test FAILED: a tree breaking a rule ({want!r}) gave {errs}")
                ok = False
        # The same tree made right passes: the check is not failing everything.
    with tempfile.TemporaryDirectory() as root:
        for path, incs in {"lib/a/p.hpp": ["a/q.hpp"], "lib/a/q.hpp": [], "lib/a/i.hpp": ["a/p.hpp"],
                           "cc/x/x.cpp": ["a/p.hpp", "cc/x/y.hpp"]}.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.writelines(f'#include "{i}"\n' for i in incs)
        errs = check(root, ["a/p.hpp"], ["a/q.hpp"], ["a/i.hpp"])
        if errs:
            print(f"self-test FAILED: a tree keeping every rule gave {errs}")
            ok = False
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", required=True)
    ap.add_argument("--public", nargs="*", default=[])
    ap.add_argument("--indirect", nargs="*", default=[])
    ap.add_argument("--internal", nargs="*", default=[])
    ap.add_argument("--no-self-test", action="store_true")
    a = ap.parse_args()
    if not a.no_self_test and not self_test():
        return 1
    errors = check(a.source, a.public, a.indirect, a.internal)
    for e in errors:
        print(e)
    n = len(a.public) + len(a.indirect) + len(a.internal)
    print(f"headers: {len(a.public)} public, {len(a.indirect)} indirect, {len(a.internal)} internal of {n}; "
          f"{len(errors)} violations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
