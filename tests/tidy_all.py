#!/usr/bin/python3
"""clang-tidy over every C++ source the build compiles, with a cache of clean results.

    tests/tidy_all.py [--no-analyzer] BUILD_DIR

Runs the checks of the tree's .clang-tidy (less clang-analyzer-* with
--no-analyzer) on every .cc file of BUILD_DIR's
compile_commands.json (the generated protobuf code aside), as many at once as
there are CPUs, and prints each finding. Exit status 1 when there is one, 2
when it cannot run.

A file found clean is remembered in a cache (SHELF_TIDY_CACHE, default
~/.cache/shelf-tidy) under a key of everything its result depends on: the
clang-tidy version, .clang-tidy, the file's compile command and the contents
of every file it includes (from ninja's dependency log, so BUILD_DIR must
have been built). A later run checks only files whose key changed, so a run
after a small change takes seconds; a cold run checks every file (on 2
cores about 40 minutes with the analyzer, 17 without). Findings are never cached: a file with one is checked
again on every run until it is fixed.
"""
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tidy_db import tidy_database  # noqa: E402


def fail(message):
    sys.stderr.write("tidy_all.py: %s\n" % message)
    sys.exit(2)


def tidy_binary():
    for name in ("clang-tidy", "clang-tidy-14"):
        for d in os.environ.get("PATH", "").split(os.pathsep):
            path = os.path.join(d, name)
            if os.access(path, os.X_OK):
                return path
    fail("clang-tidy not found (deploy/install-deps.sh installs clang-tidy)")


def ninja_deps(build):
    """Object path (relative to build) -> the files its compilation read."""
    out = subprocess.run(["ninja", "-C", build, "-t", "deps"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, check=True).stdout
    deps, current = {}, None
    for line in out.splitlines():
        if not line.strip():
            current = None
        elif not line.startswith(" "):
            current = line.split(":", 1)[0]
            deps[current] = []
        elif current is not None:
            deps[current].append(line.strip())
    return deps


class Hasher:
    """SHA-256 of files' contents, each file read once."""

    def __init__(self, build):
        self.build = build
        self.memo = {}

    def __call__(self, path):
        full = path if os.path.isabs(path) else os.path.normpath(os.path.join(self.build, path))
        if full not in self.memo:
            try:
                with open(full, "rb") as f:
                    self.memo[full] = hashlib.sha256(f.read()).hexdigest()
            except OSError:
                self.memo[full] = "missing"
        return self.memo[full]


def main():
    args = sys.argv[1:]
    # --no-analyzer: the curated checks less clang-analyzer-*, the
    # path-sensitive analyzer, which costs more than the rest together.
    no_analyzer = "--no-analyzer" in args
    args = [a for a in args if a != "--no-analyzer"]
    if len(args) != 1:
        fail("usage: tidy_all.py [--no-analyzer] BUILD_DIR")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = os.path.abspath(args[0])
    extra = ["--checks=-clang-analyzer-*"] if no_analyzer else []
    if not os.path.isfile(os.path.join(build, "compile_commands.json")):
        fail("no %s/compile_commands.json: configure and build first" % build)
    # The commands without the tests' precompiled header, which clang cannot read.
    db = tidy_database(build)
    tidy = tidy_binary()
    version = subprocess.run([tidy, "--version"], stdout=subprocess.PIPE, text=True).stdout
    with open(os.path.join(root, ".clang-tidy"), "rb") as f:
        config = f.read()
    cache = os.environ.get("SHELF_TIDY_CACHE") or os.path.expanduser("~/.cache/shelf-tidy")
    os.makedirs(cache, exist_ok=True)

    with open(os.path.join(db, "compile_commands.json")) as f:
        entries = json.load(f)
    deps = ninja_deps(build)
    hasher = Hasher(build)
    # The paths of this tree, written as they would be in any clone of it:
    # the build folder, then the tree, wherever they appear as a whole path
    # (`-I/src/tree` as much as `/src/tree/common/x.h`).
    def placeholder(path, name):
        return re.compile(re.escape(path) + r"(?=/|\s|$)"), name
    swaps = [placeholder(build, "<build>"), placeholder(root, "<root>")]

    def relative(text):
        for pattern, name in swaps:
            text = pattern.sub(name, text)
        return text
    files = {}
    for e in entries:
        path = os.path.relpath(e["file"], root)
        if (not path.endswith(".cc") or path.startswith(("build", "..")) or ".pb." in path
                or path in files):
            continue
        command = e.get("command", " ".join(e.get("arguments", [])))
        output = e.get("output") or (re.search(r" -o (\S+)", command) or [None, ""])[1]
        read = deps.get(os.path.relpath(os.path.join(e["directory"], output), build)
                        if output else "")
        if not read:
            fail("ninja has no dependency record for %s: build %s first" % (path, build))
        key = hashlib.sha256()
        key.update(version.encode() + config + " ".join(extra).encode())
        key.update(relative(command).encode())
        # Ninja records a path as the compiler wrote it: absolute from one
        # compilation, relative to the build folder from another (a ccache
        # hit). Each is written as its whole path, placeholders in, and the
        # list sorted after that, so both give one key.
        named = sorted((relative(os.path.normpath(os.path.join(build, d))), d) for d in read)
        for name, d in named:
            key.update(("\n%s %s" % (name, hasher(d))).encode())
        files[path] = key.hexdigest()

    todo = sorted(p for p, k in files.items() if not os.path.exists(os.path.join(cache, k)))
    print("tidy_all.py: %d files, %d cached clean, %d to check, %d at a time"
          % (len(files), len(files) - len(todo), len(todo), os.cpu_count()), flush=True)
    finding = re.compile(r"^\S+:\d+:\d+: (warning|error): ")

    def check(path):
        p = subprocess.run([tidy, "-p", db, "--quiet"] + extra + [path], cwd=root,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        found = [l for l in p.stdout.splitlines() if finding.match(l)]
        return path, found, p.stdout, p.returncode

    started = time.time()
    findings = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for path, found, out, rc in pool.map(check, todo):
            if found:
                findings += len(found)
                sys.stdout.write(out)
                sys.stdout.flush()
            elif rc != 0:
                findings += 1
                sys.stdout.write("%s: clang-tidy exited %d\n%s" % (path, rc, out))
            else:
                open(os.path.join(cache, files[path]), "w").close()
    print("tidy_all.py: %d finding(s) in %.0f s" % (findings, time.time() - started))
    sys.exit(1 if findings else 0)


if __name__ == "__main__":
    main()
