"""Checks of cmake/ShelfInstall.cmake: `cmake --install` of the deploy and
runtime components puts the units (rewritten for the prefix), the `shelf`
user, the example configs, the manifests, the docs and the binaries where
docs/operations.md says.

Run: SHELF_BUILD_DIR=build python3 -m pytest -q tests/deploy/test_install.py
"""
import os
import subprocess
import tempfile
import unittest

SOURCE_DIR = os.environ.get(
    "SHELF_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_DIR = os.environ.get("SHELF_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
BINARIES = ["shelf-master", "shelf-store", "shelfctl"]


def cmake_install(component, prefix, destdir=None):
    env = dict(os.environ)
    env.pop("DESTDIR", None)
    if destdir:
        env["DESTDIR"] = destdir
    proc = subprocess.run(["cmake", "--install", BUILD_DIR, "--component", component,
                           "--prefix", prefix], capture_output=True, text=True, timeout=120,
                          env=env)
    if proc.returncode != 0:
        raise AssertionError(f"cmake --install --component {component} failed "
                             f"(are all binaries built?):\n{proc.stdout}{proc.stderr}")


def exec_start(path):
    with open(path) as f:
        lines = [l.strip() for l in f if l.startswith("ExecStart=")]
    assert len(lines) == 1, path
    return lines[0][len("ExecStart="):]


class InstallTest(unittest.TestCase):
    def setUp(self):
        if not os.path.isfile(os.path.join(BUILD_DIR, "cmake_install.cmake")):
            self.fail(f"{BUILD_DIR} is not a configured build directory; set SHELF_BUILD_DIR")

    def test_deploy_component(self):
        with tempfile.TemporaryDirectory() as prefix:
            cmake_install("deploy", prefix)
            units = os.path.join(prefix, "lib", "systemd", "system")
            self.assertEqual(exec_start(os.path.join(units, "shelf-master.service")),
                             f"{prefix}/bin/shelf-master --config /etc/shelf/master.conf")
            self.assertEqual(exec_start(os.path.join(units, "shelf-store.service")),
                             f"{prefix}/bin/shelf-store --config /etc/shelf/store.conf")
            with open(os.path.join(units, "shelf-store.service")) as f:
                self.assertIn(f"file:{prefix}/share/doc/shelf/operations.md", f.read())
            for rel in ["lib/sysusers.d/shelf.conf",
                        "share/shelf/examples/master.conf",
                        "share/shelf/examples/store.conf",
                        "share/shelf/kubernetes/base/kustomization.yaml",
                        "share/shelf/kubernetes/overlays/production/kustomization.yaml",
                        "share/doc/shelf/operations.md",
                        "share/doc/shelf/security.md"]:
                self.assertTrue(os.path.isfile(os.path.join(prefix, rel)), rel)
            with open(os.path.join(SOURCE_DIR, "deploy", "config", "store.conf")) as a, \
                    open(os.path.join(prefix, "share/shelf/examples/store.conf")) as b:
                self.assertEqual(a.read(), b.read())
            script = os.path.join(prefix, "share/shelf/kubernetes/base/node-labels.sh")
            self.assertTrue(os.access(script, os.X_OK), script)

    def test_destdir_and_prefix(self):
        with tempfile.TemporaryDirectory() as stage:
            cmake_install("deploy", "/usr", destdir=stage)
            unit = os.path.join(stage, "usr/lib/systemd/system/shelf-master.service")
            self.assertEqual(exec_start(unit),
                             "/usr/bin/shelf-master --config /etc/shelf/master.conf")

    def test_runtime_component(self):
        with tempfile.TemporaryDirectory() as prefix:
            cmake_install("runtime", prefix)
            for name in BINARIES:
                path = os.path.join(prefix, "bin", name)
                self.assertTrue(os.access(path, os.X_OK), path)
            # The deploy component installs no binaries and vice versa.
            self.assertFalse(os.path.exists(os.path.join(prefix, "lib", "systemd")))

    def test_python_component(self):
        """The `shelf` package lands in Debian's dist-packages for the
        prefix, imports (shelf, shelf.mooncake, shelf.lmcache, shelf.sglang) from there, and the
        mooncake.store shim lands off every path, in share/shelf/."""
        cache = os.path.join(BUILD_DIR, "CMakeCache.txt")
        with open(cache) as f:
            if "SHELF_PYTHON_INSTALL_DIR" not in f.read():
                self.fail("the build has no Python module (SHELF_BUILD_PYTHON=OFF or no pybind11)")
        with tempfile.TemporaryDirectory() as prefix:
            cmake_install("python", prefix)
            found = [os.path.join(root, d) for root, dirs, _ in os.walk(prefix) for d in dirs
                     if d == "shelf" and os.path.basename(root) == "dist-packages"]
            self.assertEqual(len(found), 1, found)
            site = os.path.dirname(found[0])
            self.assertRegex(site, r"/lib/python3\.\d+/dist-packages$")
            compat = os.path.join(prefix, "share", "shelf", "python-compat")
            self.assertTrue(os.path.isfile(os.path.join(compat, "mooncake", "store.py")))
            env = dict(os.environ, PYTHONPATH=f"{site}:{compat}")
            proc = subprocess.run(
                ["/usr/bin/python3", "-c",
                 "import shelf, shelf.mooncake, shelf.lmcache, shelf.sglang, mooncake.store as m; "
                 "assert callable(shelf.lmcache.ShelfConnector.submit_batch_delete); "
                 "assert m.MooncakeDistributedStore is shelf.mooncake.MooncakeDistributedStore; "
                 "print(shelf.__file__)"],
                capture_output=True, text=True, timeout=60, env=env, cwd=prefix)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertTrue(proc.stdout.strip().startswith(site), proc.stdout)


if __name__ == "__main__":
    unittest.main()
