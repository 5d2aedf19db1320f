#!/usr/bin/env python3
"""Keeps README.md and doc/*.md matching the code (issue 45 item 7).

Checks, against the tree and the built apps:

  keys     every `--set KEY=` (and rdtx-sweep's --vary/--series/--facet KEY=)
           names a key `rdtx-bench --keys` lists; every configuration key
           named in inline code (`txn.options.passive_ack`) is a key, a
           section of keys, or a name the code spells (an RPC handler such as
           `txn.lock_read`); doc/configuration.md's key tables hold every key
           --keys lists, each row as --keys prints it.
  flags    every long flag given to rdtx-bench, rdtx-perf, rdtx-check or
           scripts/rdtx-sweep in a code block or an inline command appears in
           that tool's --help; a command that gives EAL options gives
           --no-huge and --no-pci too (explicit EAL options replace the
           defaults, and without huge pages the EAL refuses to start).
  paths    every repository path (conf/..., scripts/..., lib/..., build/...)
           exists (build/ paths in the build directory); every relative link
           names a file of the tree and, with #anchor, a heading of it.
  layout   doc/architecture.md's component table lists directories that exist
           and names every directory under lib/, drivers/rdma/, apps/, cc/
           and workloads/; the README's Layout block names every cc/ and
           workloads/ directory.
  tests    `meson test` is given -C BUILD and names tests and suites that
           exist; scripts/test.sh names suites that exist; a --gtest_filter
           given to a test binary matches at least one of its tests.
  errors   a range or list of allowed values quoted in an error message
           ("txn.coroutines = 0 is out of range [1, 64]") is --keys'.
  --help   the apps' own examples get the flag and EAL checks.
  commands every ```sh block of the docs runs as written, from a directory
           that looks like the repository root (its entries linked, build/
           the build directory), with the apps' bare names on the PATH and
           /tmp/ replaced by a private directory: it must exit 0 within
           --block-timeout seconds. A block preceded by
           <!-- doc-test: skip (reason) --> is not run; the reason is
           printed. A block without a language tag must not start with a
           command (tag it sh to run it, text if it is not one).

Usage: check_docs.py [--source DIR] [--build DIR] [--no-run] [--only FILE...]
                     [--block-timeout S] [-v]
Exit status: 0 all checks passed, 1 some failed (each printed as
FILE:LINE: message), 2 bad usage or an app not built.
Meson: test 'docs' (suite fast) is --no-run; 'doc-commands' (suite docs)
runs the blocks too (test/docs/meson.build).
"""

import argparse
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TOOLS = {
    "rdtx-bench": "apps/rdtx-bench/rdtx-bench",
    "rdtx-perf": "apps/rdtx-perf/rdtx-perf",
    "rdtx-check": "apps/rdtx-check/rdtx-check",
}
SWEEP = "rdtx-sweep"  # scripts/rdtx-sweep, from the source tree
# Top-level folders of the tree that docs name paths in.
TREE_DIRS = ("conf", "scripts", "doc", "lib", "cc", "workloads", "drivers", "apps", "test", ".ci")
SKIP_RE = re.compile(r"^\s*<!--\s*doc-test:\s*skip\s*(\((?P<why>.*)\))?\s*-->\s*$")
FENCE_RE = re.compile(r"^(?P<indent>\s*)```(?P<tag>[^`\s]*)\s*$")
SHELL_TAGS = ("sh", "bash", "shell")
# Names a synopsis uses for "any key": --set KEY=VALUE, --set section.key=value.
PLACEHOLDER_KEYS = ("section.key", "path")
FILE_EXTS = (".md", ".cpp", ".hpp", ".h", ".py", ".sh", ".toml", ".json", ".csv", ".sweep", ".png", ".build",
             ".txt", ".log", ".rdtxh", ".so", ".a", ".in", ".conf", ".gz", ".cc", ".c")


class Failures:
    def __init__(self):
        self.items = []

    def add(self, where, msg):
        self.items.append(f"{where}: {msg}")


# --------------------------------------------------------------------------
# Markdown: fenced blocks, inline code, links, headings.


class Block:
    def __init__(self, path, line, tag, lines, skip):
        self.path = path  # relative to the source
        self.line = line  # 1-based line of the opening fence
        self.tag = tag
        self.lines = lines  # the body, with the fence's indentation removed
        self.skip = skip  # None, or the reason given (may be "")


class Doc:
    def __init__(self, root, rel):
        self.rel = rel
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            self.text_lines = f.read().split("\n")
        self.blocks = []
        self.prose = []  # (line number, text) outside fenced blocks
        self.headings = []
        self.dangling = []  # lines of skip markers not followed by a block
        in_block = None
        skip = None
        skip_line = 0
        for i, line in enumerate(self.text_lines, 1):
            m = FENCE_RE.match(line)
            if in_block is None:
                if m:
                    in_block = (i, m.group("tag"), len(m.group("indent")), [], skip)
                    skip = None
                    continue
                s = SKIP_RE.match(line)
                if s:
                    skip = s.group("why") if s.group("why") is not None else ""
                    skip_line = i
                    continue
                if line.strip() and skip is not None:
                    self.dangling.append(skip_line)
                    skip = None
                self.prose.append((i, line))
                h = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
                if h:
                    self.headings.append(h.group(2))
            else:
                if m and not m.group("tag"):
                    start, tag, indent, body, bskip = in_block
                    self.blocks.append(Block(rel, start, tag, body, bskip))
                    in_block = None
                    continue
                body = in_block[3]
                body.append(line[in_block[2]:] if line[:in_block[2]].strip() == "" else line)

    def anchors(self):
        seen = {}
        out = set()
        for h in self.headings:
            slug = github_slug(h)
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
        return out

    def inline_code(self):
        """(line, text) of every inline code span outside fenced blocks."""
        for n, line in self.prose:
            for m in re.finditer(r"(`+)(.+?)\1", line):
                yield n, m.group(2).strip()

    def links(self):
        for n, line in self.prose:
            for m in re.finditer(r"\]\(([^)\s]+)\)", line):
                yield n, m.group(1)


def github_slug(heading):
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    s = s.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


# --------------------------------------------------------------------------
# Shell commands in the docs.


def logical_lines(lines):
    """Joins backslash continuations; drops comments and blank lines."""
    out, cur, start = [], "", None
    for i, raw in enumerate(lines):
        line = raw.rstrip()
        if start is None:
            start = i
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        if cur.strip() and not cur.lstrip().startswith("#"):
            out.append((start, cur.strip()))
        cur, start = "", None
    if cur.strip():
        out.append((start, cur.strip()))
    return out


def split_words(text):
    """Shell words of one logical line (operators as their own words);
    None if it does not split (unbalanced quotes: a fragment)."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        return list(lex)
    except ValueError:
        return None


def tool_of(word):
    base = word.rsplit("/", 1)[-1]
    if base in TOOLS or base == SWEEP:
        return base
    return None


def invocations(text):
    """(tool, eal words or None, app words) for each tool invocation in a
    logical shell line, also inside quoted arguments (rdma-vm -- '...')."""
    words = split_words(text)
    if words is None:
        return
    cmd = []
    for w in words + [";"]:
        if w and all(c in ";&|()<>" for c in w):
            yield from _one(cmd)
            cmd = []
        else:
            cmd.append(w)


def _one(cmd):
    for i, w in enumerate(cmd):
        if " " in w and re.search(r"rdtx-(bench|perf|check|sweep)\b", w):
            yield from invocations(w)
            continue
        t = tool_of(w)
        if t is None:
            continue
        rest = cmd[i + 1:]
        if t in ("rdtx-bench", "rdtx-perf") and "--" in rest:
            k = rest.index("--")
            yield t, rest[:k], rest[k + 1:]
        else:
            yield t, None, rest
        return


def long_flags(words):
    for w in words:
        for m in re.finditer(r"(?:^|[\[|(])(--[a-z][a-z0-9-]*)", w):
            yield m.group(1)
        if re.fullmatch(r"-[a-zA-Z]", w):
            yield w


# --------------------------------------------------------------------------
# The apps' own answers.


def run_out(argv, cwd=None):
    p = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return p.returncode, p.stdout


def load_keys(bench):
    rc, out = run_out([bench, "--", "--keys"])
    if rc != 0:
        sys.exit(f"check_docs: {bench} -- --keys failed ({rc}): {out[-500:]}")
    rows = {}
    header = None
    for line in out.splitlines():
        if line.startswith("KEY "):
            header = line
            continue
        if line.strip():
            rows[line.split()[0]] = line
    return header, rows


def help_flags(argv):
    rc, out = run_out(argv)
    if rc != 0:
        sys.exit(f"check_docs: {' '.join(argv)} failed ({rc}): {out[-500:]}")
    flags = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][a-zA-Z0-9-]*)", out))
    return flags, out


def check_help_examples(helps_text, helps, fail):
    """The apps' --help is documentation too: its examples' flags and EAL
    options get the checks the docs' commands get."""
    for tool, text in helps_text.items():
        if tool not in TOOLS:
            continue
        lines = text.split("\n")
        if "Examples:" not in lines:
            continue
        body = lines[lines.index("Examples:") + 1:]
        cur = ""
        for raw in body + [""]:
            if raw.strip().startswith(tool + " ") or not raw.strip():
                if cur:
                    for t, eal, app in invocations(cur):
                        check_invocation(f"{tool} --help", t, eal, app, helps, fail)
                cur = raw.strip() if raw.strip().startswith(tool + " ") else ""
                continue
            if cur.endswith("\\"):
                cur = cur[:-1] + " " + raw.strip()


def code_names(root):
    """Dotted names the code spells as string literals ("txn.lock_read",
    "calvin.batch"): RPC handlers, services, pollers."""
    names = set()
    for d in ("lib", "cc", "workloads", "apps", "drivers"):
        for path in glob.glob(os.path.join(root, d, "**", "*.[ch]pp"), recursive=True):
            with open(path, encoding="utf-8", errors="replace") as f:
                names.update(re.findall(r"\"([a-z0-9_]+(?:\.[a-z0-9_]+)+)\"", f.read()))
    return names


# --------------------------------------------------------------------------
# The checks.


def check_keys(docs, keys, header, names, fail):
    sections = set()
    for k in keys:
        parts = k.split(".")
        for i in range(1, len(parts)):
            sections.add(".".join(parts[:i]))
    firsts = {k.split(".")[0] for k in keys if "." in k}

    def known(name):
        if name in keys or name in sections or name in names:
            return True
        if "*" in name:  # run.virtual_*
            pat = re.compile(re.escape(name).replace(r"\*", ".*") + "$")
            return any(pat.match(k) for k in keys)
        return False

    set_re = re.compile(r"--(set|vary|series|facet)[ =]+['\"]?([A-Za-z0-9_.-]+)=")
    # A quoted error message about a --set argument ("--set txn=5: 'txn' is
    # a section, not a key") names a bad key on purpose.
    error_line = re.compile(r"^\s*--set \S+: ")
    for d in docs:
        for n, line in d.prose:
            for m in set_re.finditer(line):
                check_set(d.rel, n, m.group(1), m.group(2), keys, fail)
        for b in d.blocks:
            for i, line in enumerate(b.lines):
                if error_line.match(line):
                    continue
                for m in set_re.finditer(line):
                    check_set(d.rel, b.line + 1 + i, m.group(1), m.group(2), keys, fail)
        # Key names in inline code: `txn.coroutines`, `txn.coroutines = 10`.
        for n, code in d.inline_code():
            for m in re.finditer(r"(?<![\w./-])([a-z0-9_]+(?:\.[a-z0-9_*]+)+)(?![\w/(-])", code):
                name = m.group(1)
                if name.split(".")[0] not in firsts or name.endswith(FILE_EXTS):
                    continue
                if not known(name):
                    fail.add(f"{d.rel}:{n}", f"'{name}' is not a configuration key (rdtx-bench -- --keys)"
                             " nor a name the code spells")

    # Quoted errors: "txn.coroutines = 0 is out of range [1, 64]", "txn.protocol
    # = "occc" is not one of: 2pl, calvin, ...": the range and the list as
    # --keys gives them.
    ranges = key_ranges(header, keys)
    err_re = re.compile(r"([a-z0-9_]+(?:\.[a-z0-9_]+)+) = \S+ (?:\([^)]*\) )?is (?:out of range (\[[^\]]*\])"
                        r"|not one of: ([a-z0-9_, ]+[a-z0-9_]))")
    for d in docs:
        lines = list(d.prose) + [(b.line + 1 + i, l) for b in d.blocks for i, l in enumerate(b.lines)]
        for n, line in lines:
            for m in err_re.finditer(line):
                key = m.group(1)
                if key not in ranges:
                    continue
                if m.group(2) and m.group(2) != ranges[key]:
                    fail.add(f"{d.rel}:{n}", f"{key}'s range is {ranges[key]} (rdtx-bench -- --keys), not {m.group(2)}")
                if m.group(3):
                    want = [v.strip() for v in ranges[key].split("|")]
                    got = [v.strip() for v in m.group(3).split(",")]
                    if sorted(want) != sorted(got):
                        fail.add(f"{d.rel}:{n}", f"{key}'s values are {', '.join(want)} (rdtx-bench -- --keys), "
                                 f"not {', '.join(got)}")

    conf = next((d for d in docs if d.rel == "doc/configuration.md"), None)
    if conf is None:
        return
    listed = {}
    norm = lambda s: " ".join(s.split())
    for b in conf.blocks:
        if not b.lines or not b.lines[0].startswith("KEY "):
            continue
        if norm(b.lines[0]) != norm(header):
            fail.add(f"{conf.rel}:{b.line + 1}", "key table header differs from rdtx-bench -- --keys")
        for i, row in enumerate(b.lines[1:], 2):
            if not row.strip():
                continue
            key = row.split()[0]
            where = f"{conf.rel}:{b.line + i}"
            if key not in keys:
                fail.add(where, f"key table lists '{key}', which rdtx-bench -- --keys does not")
                continue
            if key in listed:
                fail.add(where, f"'{key}' is listed twice (also at line {listed[key]})")
            listed[key] = b.line + i
            if norm(row) != norm(keys[key]):
                fail.add(where, f"'{key}' differs from rdtx-bench -- --keys, which prints:\n    {keys[key]}")
    for k in sorted(set(keys) - set(listed)):
        fail.add(conf.rel, f"key '{k}' (rdtx-bench -- --keys) is in none of the key tables")


def key_ranges(header, keys):
    """key -> its RANGE column of --keys ("[1, 64]", "a | b | c")."""
    start, end = header.index("RANGE"), header.index("DESCRIPTION")
    return {k: row[start:end].strip() for k, row in keys.items()}


def check_set(rel, n, opt, key, keys, fail):
    if opt in ("vary", "series", "facet") and key == "config":
        return
    if key.isupper() or key in PLACEHOLDER_KEYS:
        return
    if key not in keys:
        fail.add(f"{rel}:{n}", f"--{opt} {key}=...: unknown key (rdtx-bench -- --keys)")


def doc_commands(d, any_command=False):
    """(line, logical line, in a shell block) of every command in shell
    blocks, text blocks' synopsis lines and inline code that starts with a
    tool (any_command: inline code that starts with any word)."""
    for b in d.blocks:
        if b.tag in SHELL_TAGS or b.tag in ("", "text", "console"):
            for i, line in logical_lines(b.lines):
                line = re.sub(r"^\$ ", "", line)
                yield b.line + 1 + i, line, b.tag in SHELL_TAGS
    for n, code in d.inline_code():
        words = code.split()
        if words and (any_command or tool_of(words[0])):
            yield n, code, False


def check_flags(docs, helps, fail):
    for d in docs:
        for n, line, is_shell in doc_commands(d):
            words = line.split()
            if is_shell or (words and tool_of(words[0]) and split_words(line) is not None
                            and "[" not in line):
                found = list(invocations(line))
            elif words and tool_of(words[0]):
                # A synopsis or an inline command: the flags after the tool.
                t = tool_of(words[0])
                rest = words[1:]
                eal = None
                if t in ("rdtx-bench", "rdtx-perf") and "--" in rest:
                    k = rest.index("--")
                    eal, rest = rest[:k], rest[k + 1:]
                found = [(t, eal, rest)]
            else:
                continue
            for tool, eal, app in found:
                check_invocation(f"{d.rel}:{n}", tool, eal, app, helps, fail)


def check_invocation(where, tool, eal, app, helps, fail):
    allowed = helps[tool]
    for f in long_flags(app):
        if f not in allowed:
            fail.add(where, f"{tool} has no option {f} (see {tool} --help)")
    if eal and not any(w.startswith("[") or w.startswith("EAL") for w in eal):
        if "--no-huge" not in eal or "--no-pci" not in eal:
            fail.add(where, f"{tool} {' '.join(eal)} --: explicit EAL options replace the defaults; add "
                     "--no-huge --no-pci (else the EAL wants huge pages and PCI)")


PATH_RE = re.compile(r"(?<![\w./~$-])((?:\./)?(?:" + "|".join(re.escape(t) for t in TREE_DIRS) +
                     r"|build)/[A-Za-z0-9_.,{}/*<>+-]*)")


def expand_braces(p):
    m = re.search(r"\{([^{}]*)\}", p)
    if not m:
        return [p]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(p[:m.start()] + alt + p[m.end():])
    return out


def check_path(root, build, rel, n, p, fail):
    p = p.rstrip(".,:;")
    # A list: --series config=conf/a.toml,conf/b.toml (commas outside braces).
    parts = re.split(r",(?![^{]*\})", p)
    if len(parts) > 1:
        for q in parts:
            if PATH_RE.fullmatch(q):
                check_path(root, build, rel, n, q, fail)
        return
    if p.startswith("./"):
        p = p[2:]
    if "..." in p or not p:
        return
    # A placeholder ends what can be checked: conf/<workload>/, conf/W/P.toml,
    # rdtx-sweep's conf/{workload}/x.toml; the folder before it must exist.
    cut = len(p)
    m = re.search(r"<|>|\{[^,}]*\}", p)
    if m:
        cut = m.start()
    comps = p.split("/")
    for i, c in enumerate(comps):
        stem = c.split(".")[0]
        if stem.isupper() and len(stem) >= 1 and stem.isalpha():
            cut = min(cut, len("/".join(comps[:i])) + 1)
            break
    if cut < len(p):
        p = p[:cut]
        p = p[:p.rfind("/") + 1]
    base = root
    if p.startswith("build/"):
        if build is None:
            return
        base, p = build, p[len("build/"):]
        if not p:
            return
    for q in expand_braces(p):
        full = os.path.join(base, q)
        if "*" in q:
            ok = bool(glob.glob(full))
        elif q.endswith("/"):
            ok = os.path.isdir(full)
        else:
            ok = os.path.exists(full)
        if not ok:
            shown = q if base == root else "build/" + q
            fail.add(f"{rel}:{n}", f"path '{shown}' does not exist")


def check_paths(root, build, docs, anchors, fail):
    for d in docs:
        for n, line in d.prose:
            for m in PATH_RE.finditer(line):
                check_path(root, build, d.rel, n, m.group(1), fail)
        for b in d.blocks:
            if b.tag == "cpp":
                continue
            for i, line in enumerate(b.lines):
                for m in PATH_RE.finditer(line):
                    check_path(root, build, d.rel, b.line + 1 + i, m.group(1), fail)
        for n, target in d.links():
            if re.match(r"^[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(root, os.path.dirname(d.rel), path)) if path else \
                os.path.join(root, d.rel)
            if not os.path.exists(full):
                fail.add(f"{d.rel}:{n}", f"link to '{target}': no such file")
                continue
            if anchor:
                relt = os.path.relpath(full, root)
                if relt in anchors and anchor not in anchors[relt]:
                    fail.add(f"{d.rel}:{n}", f"link to '{target}': {relt} has no heading with that anchor")


def meson_tests(build):
    """(test names, benchmark names, suites) of the build, or None without meson."""
    meson = shutil.which("meson")
    if meson is None:
        return None
    import json
    p = subprocess.run([meson, "introspect", "--tests", "--benchmarks", build], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True, timeout=60)
    if p.returncode != 0:
        return None
    d = json.loads(p.stdout)
    tests = {t["name"] for t in d["tests"]}
    benches = {t["name"] for t in d["benchmarks"]}
    suites = {s.split(":", 1)[-1] for t in d["tests"] + d["benchmarks"] for s in t["suite"]}
    return tests, benches, suites


def check_test_commands(build, docs, fail):
    """`meson test` needs -C BUILD from the repository root, and names tests
    and suites that exist; scripts/test.sh names suites that exist; a
    --gtest_filter given to a test binary matches at least one test."""
    known = meson_tests(build)
    for d in docs:
        for n, line, _ in doc_commands(d, any_command=True):
            words = split_words(line)
            if words is None:
                continue
            cmds, cur = [], []
            for w in words + [";"]:
                if w and all(c in ";&|()<>" for c in w):
                    cmds.append(cur)
                    cur = []
                else:
                    cur.append(w)
            for cmd in cmds:
                env = {}
                while cmd and re.match(r"^[A-Z_]+=", cmd[0]):  # VAR=value before the command
                    k, v = cmd[0].split("=", 1)
                    env[k] = v
                    cmd = cmd[1:]
                if cmd[:1] == ["nice"]:
                    cmd = cmd[3:] if cmd[1:2] == ["-n"] else cmd[1:]
                if cmd[:2] == ["meson", "test"]:
                    check_meson_test(d.rel, n, cmd[2:], known, fail)
                elif cmd and cmd[0].endswith("scripts/test.sh") and known and len(cmd) > 2:
                    for suite in cmd[2:]:
                        if suite.startswith("-") or suite.rstrip(".").isupper():  # SUITE...: a placeholder
                            continue
                        if suite not in known[2]:
                            fail.add(f"{d.rel}:{n}", f"scripts/test.sh: no suite '{suite}' (meson introspect --tests)")
                elif cmd and cmd[0].startswith("build/test/"):
                    for w in cmd[1:]:
                        if w.startswith("--gtest_filter="):
                            check_gtest_filter(build, d.rel, n, cmd[0], w.split("=", 1)[1], fail, env)


def check_meson_test(rel, n, args, known, fail):
    if "-C" not in args:
        fail.add(f"{rel}:{n}", "meson test without -C BUILD: from the repository root it finds no build")
    if known is None:
        return
    tests, benches, suites = known
    names = benches if "--benchmark" in args else tests
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-C", "--suite", "--timeout-multiplier", "--num-processes", "--repeat", "--setup", "--test-args"):
            if a == "--suite" and i + 1 < len(args) and args[i + 1] not in suites:
                fail.add(f"{rel}:{n}", f"meson test --suite {args[i + 1]}: no such suite")
            i += 2
            continue
        if not a.startswith("-") and a not in names:
            fail.add(f"{rel}:{n}", f"meson test {a}: no such {'benchmark' if names is benches else 'test'}")
        i += 1


def check_gtest_filter(build, rel, n, prog, pattern, fail, env=None):
    exe = os.path.join(build, prog[len("build/"):])
    if not os.access(exe, os.X_OK):
        return  # the path check reports it
    # The command's own variables (RDTX_CONFORMANCE_PEER adds the verbs_remote tests).
    p = subprocess.run([exe, "--gtest_list_tests", "--gtest_filter=" + pattern], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60, env={**os.environ, **(env or {})})
    if not any(l.startswith("  ") for l in p.stdout.splitlines()):
        fail.add(f"{rel}:{n}", f"{prog} --gtest_filter={pattern} matches no test")


def check_layout(root, docs, fail):
    arch = next((d for d in docs if d.rel == "doc/architecture.md"), None)
    if arch is None:
        return
    rows = {}
    for n, line in arch.prose:
        m = re.match(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$", line)
        if m and "/" in m.group(1):
            rows[m.group(1)] = (n, m.group(2))
    if not rows:
        fail.add(arch.rel, "no component table (| `lib/base` | ... |)")
        return
    for comp, (n, _) in rows.items():
        if not os.path.isdir(os.path.join(root, comp)):
            fail.add(f"{arch.rel}:{n}", f"component '{comp}' is not a directory of the tree")

    def subdirs(d):
        full = os.path.join(root, d)
        return sorted(e for e in os.listdir(full) if os.path.isdir(os.path.join(full, e)))

    for parent in ("lib", "drivers/rdma", "apps"):
        for e in subdirs(parent):
            if f"{parent}/{e}" not in rows:
                fail.add(arch.rel, f"component table lacks `{parent}/{e}`")
    for parent in ("cc", "workloads"):
        row = rows.get(parent + "/")
        if row is None:
            fail.add(arch.rel, f"component table lacks `{parent}/`")
            continue
        named = set(re.findall(r"`([^`]+)`", row[1]))
        for e in subdirs(parent):
            if e not in named:
                fail.add(f"{arch.rel}:{row[0]}", f"the `{parent}/` row does not name `{e}` ({parent}/{e}/)")
    readme = next((d for d in docs if d.rel == "README.md"), None)
    if readme is None:
        return
    for b in readme.blocks:
        text = "\n".join(b.lines)
        if not re.search(r"^cc/\s", text, re.M):
            continue
        for parent in ("cc", "workloads"):
            m = re.search(r"^" + parent + r"/\s+(.*(?:\n {4,}.*)*)", text, re.M)
            words = set(re.findall(r"[a-z0-9]+", m.group(1))) if m else set()
            for e in subdirs(parent):
                if e not in words:
                    fail.add(f"README.md:{b.line}", f"the Layout block's {parent}/ line does not name {e}")


# --------------------------------------------------------------------------
# Running the shell blocks.


def sandbox(root, build, tools):
    d = tempfile.mkdtemp(prefix="rdtx-doc-test-")
    for e in os.listdir(root):
        if e.startswith("build") or e == ".git":
            continue
        os.symlink(os.path.join(root, e), os.path.join(d, e))
    os.symlink(os.path.abspath(build), os.path.join(d, "build"))
    os.mkdir(os.path.join(d, "bin"))
    os.mkdir(os.path.join(d, "tmp"))
    for name, path in tools.items():
        os.symlink(path, os.path.join(d, "bin", name))
    return d


def command_blocks(docs):
    for d in docs:
        for b in d.blocks:
            if b.tag in SHELL_TAGS:
                yield b


# A block whose commands exit 0 can still show a failure: a node started
# with & (whose status `wait` drops) prints a failed report or an error.
FAILED_OUTPUT = re.compile(r"^(result: FAILED|.*\bNOT CERTIFIED\b|rdtx-sweep: error: "
                           r"|rdtx-(bench|perf|check): (?!node \d+ of \d+, waiting for the others|checking the history: ))", re.M)


def run_blocks(root, build, docs, tools, timeout, fail, verbose):
    # One doc test at a time on a host: the docs' process-mode clusters
    # listen on fixed ports (7100-7102) and one telemetry example uses a
    # fixed --file-prefix.
    import fcntl
    lock = open(os.path.join(tempfile.gettempdir(), "rdtx-doc-test.lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    box = sandbox(root, build, tools)
    env = dict(os.environ)
    env["PATH"] = os.path.join(box, "bin") + os.pathsep + env.get("PATH", "")
    env["TMPDIR"] = os.path.join(box, "tmp")
    ran = skipped = 0
    t_all = time.monotonic()
    try:
        for b in command_blocks(docs):
            where = f"{b.path}:{b.line}"
            if b.skip is not None:
                skipped += 1
                if not b.skip.strip():
                    fail.add(where, "doc-test: skip without a reason: write <!-- doc-test: skip (why) -->")
                print(f"skip  {where}  ({b.skip.strip()})")
                continue
            text = "\n".join(b.lines).replace("/tmp/", os.path.join(box, "tmp") + "/")
            t0 = time.monotonic()
            p = subprocess.Popen(["bash", "-eo", "pipefail", "-c", text], cwd=box, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 start_new_session=True)
            try:
                out, _ = p.communicate(timeout=timeout)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                out, _ = p.communicate()
                rc = None
            secs = time.monotonic() - t0
            ran += 1
            bad = FAILED_OUTPUT.search(out) if rc == 0 else None
            if bad:
                rc = "0 but printed a failure: " + bad.group(0)
            if rc == 0:
                print(f"ok    {where}  {secs:.1f} s")
                if verbose:
                    print("      " + out.replace("\n", "\n      "))
                continue
            tail = "\n".join("      | " + l for l in out.rstrip().splitlines()[-12:])
            if rc is None:
                fail.add(where, f"command block did not finish in {timeout} s (cheap blocks only: shorten it, "
                         f"or mark it <!-- doc-test: skip (why) -->)\n{tail}")
                print(f"FAIL  {where}  timed out after {timeout} s")
            else:
                fail.add(where, f"command block exited {rc} as written\n{tail}")
                print(f"FAIL  {where}  exit {rc} after {secs:.1f} s")
    finally:
        shutil.rmtree(box, ignore_errors=True)
    print(f"doc commands: {ran} blocks run, {skipped} skipped, {time.monotonic() - t_all:.1f} s")


def lint_blocks(docs, fail):
    """An untagged block that starts with a command is ambiguous: tag it. A
    skip marker must come right before its block (blank lines allowed)."""
    for d in docs:
        for n in d.dangling:
            fail.add(f"{d.rel}:{n}", "doc-test: skip marker not followed by a code block (it skips nothing)")
        for b in d.blocks:
            if b.tag:
                continue
            first = next((l for _, l in logical_lines(b.lines)), "")
            w = first.split()[0] if first.split() else ""
            if tool_of(w) or w.startswith(("scripts/", "./scripts/", "build/")):
                fail.add(f"{d.rel}:{b.line}", "untagged block starts with a command: tag it ```sh (run by the "
                         "doc test) or ```text (a synopsis or an output)")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default=os.path.dirname(os.path.dirname(here)), help="the repository")
    ap.add_argument("--build", default=None, help="the build directory (default: SOURCE/build)")
    ap.add_argument("--no-run", action="store_true", help="check keys, flags, paths and layout; run nothing")
    ap.add_argument("--only", nargs="*", help="docs to check (relative to SOURCE), default README.md doc/*.md")
    ap.add_argument("--block-timeout", type=float, default=30.0, help="seconds a command block may take")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the output of the blocks run")
    a = ap.parse_args()
    root = os.path.abspath(a.source)
    build = os.path.abspath(a.build or os.path.join(root, "build"))
    tools = {t: os.path.join(build, p) for t, p in TOOLS.items()}
    for t, p in tools.items():
        if not os.access(p, os.X_OK):
            print(f"check_docs: {p}: not built", file=sys.stderr)
            return 2
    tools[SWEEP] = os.path.join(root, "scripts", SWEEP)

    all_docs = ["README.md"] + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "doc", "*.md")))
    docs_all = [Doc(root, r) for r in all_docs]
    anchors = {d.rel: d.anchors() for d in docs_all}
    docs = [d for d in docs_all if not a.only or d.rel in a.only]

    header, keys = load_keys(tools["rdtx-bench"])
    helps, helps_text = {}, {}
    for t in TOOLS:
        helps[t], helps_text[t] = help_flags([tools[t], "--help"])
    helps[SWEEP], helps_text[SWEEP] = help_flags([sys.executable, tools[SWEEP], "--help"])
    fail = Failures()
    t0 = time.monotonic()
    check_keys(docs, keys, header, code_names(root), fail)
    check_flags(docs, helps, fail)
    check_help_examples(helps_text, helps, fail)
    check_paths(root, build, docs, anchors, fail)
    check_layout(root, docs, fail)
    check_test_commands(build, docs, fail)
    lint_blocks(docs, fail)
    n_static = len(fail.items)
    print(f"static checks: {len(docs)} docs, {len(keys)} keys, {n_static} problems, {time.monotonic() - t0:.1f} s")
    if not a.no_run:
        run_blocks(root, build, docs, tools, a.block_timeout, fail, a.verbose)
    for f in fail.items:
        print(f)
    print(f"check_docs: {'FAILED, ' + str(len(fail.items)) + ' problems' if fail.items else 'passed'}")
    return 1 if fail.items else 0


if __name__ == "__main__":
    sys.exit(main())
