"""Checks of deploy/docker/Dockerfile, which cannot be built here (no
container engine): its structure, that its runtime packages exist in
Debian 12, and that they provide every shared library the built binaries
load (each library's owning package, found through dpkg, must be in the
dependency closure of the runtime list).

Run: SHELF_BIN_DIR=build/bin python3 -m pytest -q tests/deploy/test_docker.py
"""
import glob
import os
import re
import shutil
import subprocess
import unittest

import yaml

SOURCE_DIR = os.environ.get(
    "SHELF_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BIN_DIR = os.environ.get("SHELF_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
DOCKERFILE = os.path.join(SOURCE_DIR, "deploy", "docker", "Dockerfile")
BINARIES = ["shelf-master", "shelf-store", "shelfctl"]
# Present in every Debian image (Essential, or what they pull in).
BASE = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}


def dockerfile_stages():
    """[(from_line, [instructions])] with continuation lines joined."""
    with open(DOCKERFILE) as f:
        text = re.sub(r"\\\n", " ", f.read())
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append((line, []))
        elif stages:
            stages[-1][1].append(line)
    return stages


def runtime_packages():
    _, instructions = dockerfile_stages()[-1]
    for ins in instructions:
        m = re.search(r"apt-get install (.*?)(&&|$)", ins)
        if m:
            return [w for w in m.group(1).split() if not w.startswith("-")]
    raise AssertionError("the runtime stage installs no packages")


def dpkg_file_owners():
    """{path: package} from dpkg's file lists."""
    owners = {}
    for listing in glob.glob("/var/lib/dpkg/info/*.list"):
        package = os.path.basename(listing)[:-len(".list")].split(":")[0]
        with open(listing, errors="replace") as f:
            for line in f:
                owners[line.rstrip("\n")] = package
    return owners


def installed_depends():
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Depends}, ${Pre-Depends}\n"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    deps = {}
    for line in out.splitlines():
        package, _, rest = line.partition("\t")
        names = set()
        for group in rest.split(","):
            for alt in group.split("|"):
                name = re.sub(r"\(.*?\)", "", alt).strip().split(":")[0]
                if name:
                    names.add(name)
        deps[package] = names
    return deps


def closure(roots, deps):
    seen, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo.extend(deps.get(p, ()))
    return seen


def shared_libraries(path):
    out = subprocess.run(["ldd", path], capture_output=True, text=True, check=True,
                         timeout=30).stdout
    libs = []
    for line in out.splitlines():
        m = re.search(r"=>\s+(/\S+)", line)
        if m:
            libs.append(m.group(1))
        elif "not found" in line:
            raise AssertionError(f"{path}: {line.strip()}")
    return libs


def owner_of(path, owners):
    real = os.path.realpath(path)
    candidates = {path, real}
    for p in list(candidates):  # merged /usr: dpkg may list either spelling
        if p.startswith("/usr/"):
            candidates.add(p[4:])
        else:
            candidates.add("/usr" + p)
    for c in candidates:
        if c in owners:
            return owners[c]
    return None


class DockerfileTest(unittest.TestCase):
    def test_stages(self):
        stages = dockerfile_stages()
        self.assertEqual(len(stages), 2)
        self.assertRegex(stages[0][0], r"^FROM debian:12 AS builder$")
        self.assertRegex(stages[1][0], r"^FROM debian:12(-slim)? AS runtime$")
        builder = "\n".join(stages[0][1])
        self.assertIn("deploy/install-deps.sh", builder)
        self.assertTrue(os.path.isfile(os.path.join(SOURCE_DIR, "deploy", "install-deps.sh")))
        self.assertIn("cmake --install", builder)
        runtime = "\n".join(stages[1][1])
        self.assertIn("--no-install-recommends", runtime)
        self.assertIn("COPY --from=builder", runtime)
        self.assertIn("USER shelf", runtime)

    def test_user_matches_kubernetes(self):
        with open(DOCKERFILE) as f:
            uid = re.search(r"--uid (\d+)", f.read()).group(1)
        with open(os.path.join(SOURCE_DIR, "deploy/kubernetes/base/master.yaml")) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        sts = [d for d in docs if d["kind"] == "StatefulSet"][0]
        self.assertEqual(str(sts["spec"]["template"]["spec"]["securityContext"]["runAsUser"]),
                         uid)

    def test_runtime_packages_exist_in_debian(self):
        if shutil.which("apt-cache") is None:
            self.skipTest("not a Debian system")
        probe = subprocess.run(["apt-cache", "show", "libc6"], capture_output=True, timeout=60)
        if probe.returncode != 0:
            self.skipTest("apt has no package lists (run apt-get update)")
        wanted = runtime_packages()
        # One call for all: apt-cache prints the ones it knows and fails on
        # the others.
        proc = subprocess.run(["apt-cache", "show", "--no-all-versions", *wanted],
                              capture_output=True, text=True, timeout=120)
        known = set(re.findall(r"^Package: (\S+)$", proc.stdout, re.MULTILINE))
        self.assertEqual(sorted(set(wanted) - known), [], "packages Debian does not have")

    def test_runtime_packages_cover_the_binaries(self):
        if shutil.which("dpkg-query") is None or shutil.which("ldd") is None:
            self.skipTest("needs dpkg and ldd")
        owners = dpkg_file_owners()
        provided = closure(set(runtime_packages()) | BASE, installed_depends())
        missing = {}
        for name in BINARIES:
            exe = os.path.join(BIN_DIR, name)
            self.assertTrue(os.access(exe, os.X_OK), f"{exe} is not built; build {name} or "
                                                     f"set SHELF_BIN_DIR")
            for lib in shared_libraries(exe):
                package = owner_of(lib, owners)
                if package is None:
                    # A toolkit outside Debian (CUDA under /usr/local): the
                    # image is built without it.
                    self.assertTrue(lib.startswith("/usr/local/") or "/cuda" in lib,
                                    f"{name}: {lib} belongs to no Debian package")
                    continue
                if package not in provided:
                    missing.setdefault(package, []).append(f"{name}: {lib}")
        self.assertEqual(missing, {}, "add these packages to the runtime stage")


if __name__ == "__main__":
    unittest.main()
