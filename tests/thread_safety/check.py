#!/usr/bin/python3
"""Compiles every project source that carries Abseil thread-safety
annotations with clang -Wthread-safety -Werror (syntax only), using the
include paths and definitions CMake recorded for the GCC build.

  check.py BUILD_DIR SOURCE_DIR

Exit 0: clang agrees that every GUARDED_BY member is touched only under its
mutex and every *_LOCKS_REQUIRED function is called with it held.
Exit 77 (CTest: skipped): no clang++ on this machine.
"""
import json
import re
import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ANNOTATIONS = (b"ABSL_GUARDED_BY", b"ABSL_EXCLUSIVE_LOCKS_REQUIRED", b"ABSL_SHARED_LOCKS_REQUIRED",
               b"ABSL_LOCKS_EXCLUDED", b"ABSL_PT_GUARDED_BY")


def has_annotations(path):
    try:
        with open(path, "rb") as f:
            return any(a in f.read() for a in ANNOTATIONS)
    except OSError:
        return False


def annotated(path, source_dir):
    """True when the file or a project header it includes is annotated."""
    if has_annotations(path):
        return True
    with open(path, "rb") as f:
        for line in f:
            m = re.match(rb'\s*#\s*include\s+"([^"]+)"', line)
            if m and has_annotations(os.path.join(source_dir, m.group(1).decode())):
                return True
    return False


def clang_args(command):
    """Keeps what clang needs from a GCC command line: -I, -D, -std."""
    keep = []
    args = shlex.split(command)
    i = 1
    while i < len(args):
        a = args[i]
        if a in ("-I", "-D", "-isystem"):
            keep += [a, args[i + 1]]
            i += 2
            continue
        if a.startswith(("-I", "-D", "-std=", "-isystem")):
            keep.append(a)
        i += 1
    return keep


def main():
    build_dir, source_dir = sys.argv[1], os.path.realpath(sys.argv[2])
    clang = shutil.which("clang++") or shutil.which("clang++-14")
    if clang is None:
        print("thread-safety check: SKIPPED: no clang++ (apt-get install clang)")
        return 77
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        entries = json.load(f)
    jobs = {}
    for e in entries:
        path = os.path.realpath(e["file"])
        if not path.startswith(source_dir + os.sep) or not path.endswith(".cc"):
            continue
        rel = os.path.relpath(path, source_dir)
        if rel.startswith(("build", "tests/fuzz")) or rel in jobs:
            continue
        if annotated(path, source_dir):
            cmd = e.get("command") or " ".join(shlex.quote(a) for a in e["arguments"])
            jobs[rel] = [clang, "-fsyntax-only", "-Wthread-safety", "-Wthread-safety-beta",
                         "-Werror=thread-safety", "-Werror=thread-safety-beta",
                         "-Wno-unknown-warning-option"] + clang_args(cmd) + [path]
    if not jobs:
        print("thread-safety check: no annotated sources found in", build_dir)
        return 1

    def run(item):
        rel, cmd = item
        p = subprocess.run(cmd, cwd=build_dir, capture_output=True, text=True)
        return rel, p.returncode, p.stderr

    failed = 0
    workers = int(os.environ.get("SHELF_THREAD_SAFETY_JOBS", "2"))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for rel, rc, err in pool.map(run, sorted(jobs.items())):
            print(("ok    " if rc == 0 else "FAIL  ") + rel)
            if rc != 0:
                failed += 1
                sys.stdout.write(err)
    print(f"thread-safety check: {len(jobs) - failed}/{len(jobs)} annotated sources clean")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
