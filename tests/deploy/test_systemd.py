"""Checks of the systemd units and the example config files in deploy/.

- `systemd-analyze verify` accepts both units, run on copies whose ExecStart
  names the binaries just built, with no warning about them (verify exits 0
  on an unknown key, so its output is read too).
- The units and the example configs agree on paths (config file, run dir,
  SSD dir), so the store's socket and SSD tier land where systemd provides
  writable directories.
- Every key of the example configs (deploy/config/ and the ones the
  Kubernetes manifests mount), including the commented-out examples
  (`# key = value`), is a flag the binary accepts: the binary parses
  `--config FILE` before it looks at `--help`, so `BIN --config FILE --help`
  exits 0 only when the whole file is valid; the keys are also looked up in
  the help text, in case that order ever changes.

Run: SHELF_BIN_DIR=build/bin SHELF_SOURCE_DIR=. python3 -m pytest -q tests/deploy
"""
import glob
import os
import re
import shutil
import subprocess
import tempfile
import unittest

SOURCE_DIR = os.environ.get(
    "SHELF_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BIN_DIR = os.environ.get("SHELF_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
UNITS = os.path.join(SOURCE_DIR, "deploy", "systemd")
CONFIGS = os.path.join(SOURCE_DIR, "deploy", "config")
# binary -> its unit and example config.
SERVICES = {
    "shelf-master": ("shelf-master.service", "master.conf"),
    "shelf-store": ("shelf-store.service", "store.conf"),
    "shelf-resp": ("shelf-resp.service", "resp.conf"),
}
KEY_LINE = re.compile(r"^\s*(#\s*)?([a-z][a-z0-9-]*)\s*=\s*(.*?)\s*$")


def binary(name):
    path = os.path.join(BIN_DIR, name)
    if not os.access(path, os.X_OK):
        raise AssertionError(
            f"{path} is not built: build shelf-master and shelf-store first "
            f"(ninja -C <build> shelf-master shelf-store), or set SHELF_BIN_DIR")
    return path


def unit_settings(path):
    """[(section, key, value)] of a unit file, in order."""
    out, section = [], None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line.strip("[]")
                continue
            key, _, value = line.partition("=")
            out.append((section, key.strip(), value.strip()))
    return out


def config_keys(path, commented):
    """{key: value} of the `key = value` lines; commented ones with `commented`."""
    keys = {}
    with open(path) as f:
        for line in f:
            m = KEY_LINE.match(line)
            if m and (commented or not m.group(1)):
                keys[m.group(2)] = m.group(3)
    return keys


class UnitTest(unittest.TestCase):
    def test_systemd_analyze_verify(self):
        analyze = shutil.which("systemd-analyze")
        if analyze is None:
            self.skipTest("systemd-analyze is not installed (Debian package: systemd)")
        with tempfile.TemporaryDirectory() as tmp:
            names = []
            for name, (unit, _) in SERVICES.items():
                with open(os.path.join(UNITS, unit)) as f:
                    text = f.read()
                self.assertIn(f"ExecStart=/usr/local/bin/{name} ", text)
                text = text.replace(f"/usr/local/bin/{name}", binary(name))
                with open(os.path.join(tmp, unit), "w") as f:
                    f.write(text)
                names.append(os.path.join(tmp, unit))
            proc = subprocess.run([analyze, "verify", "--man=no", *names],
                                  capture_output=True, text=True, timeout=60)
            output = proc.stdout + proc.stderr
            self.assertEqual(proc.returncode, 0, output)
            # Warnings (an unknown key, a bad value) still exit 0.
            ours = [l for l in output.splitlines()
                    if tmp in l or any(u in l for u, _ in SERVICES.values())]
            self.assertEqual(ours, [], output)

    def test_units_match_configs(self):
        master = dict((k, v) for _, k, v in
                      unit_settings(os.path.join(UNITS, "shelf-master.service")))
        self.assertEqual(master["ExecStart"],
                         "/usr/local/bin/shelf-master --config /etc/shelf/master.conf")
        store_settings = unit_settings(os.path.join(UNITS, "shelf-store.service"))
        store = dict((k, v) for _, k, v in store_settings)
        self.assertEqual(store["ExecStart"],
                         "/usr/local/bin/shelf-store --config /etc/shelf/store.conf")
        resp = dict((k, v) for _, k, v in
                    unit_settings(os.path.join(UNITS, "shelf-resp.service")))
        self.assertEqual(resp["ExecStart"],
                         "/usr/local/bin/shelf-resp --config /etc/shelf/resp.conf")
        for settings in (master, store, resp):
            self.assertEqual(settings["Type"], "simple")
            self.assertEqual(settings["Restart"], "on-failure")
            self.assertEqual(settings["User"], "shelf")
            self.assertEqual(settings["ProtectSystem"], "strict")
            self.assertEqual(settings["NoNewPrivileges"], "yes")
        self.assertEqual(store["LimitMEMLOCK"], "infinity")
        self.assertEqual(store["AmbientCapabilities"], "CAP_IPC_LOCK")
        device_allow = [v for _, k, v in store_settings if k == "DeviceAllow"]
        self.assertTrue(any("infiniband" in v and v.endswith(" rw") for v in device_allow))

        conf = config_keys(os.path.join(CONFIGS, "store.conf"), commented=False)
        run_dir = "/run/" + store["RuntimeDirectory"]
        state_dir = "/var/lib/" + store["StateDirectory"]
        self.assertTrue(conf["run-dir"] == run_dir or conf["run-dir"].startswith(run_dir + "/"),
                        f"run-dir {conf['run-dir']} is outside RuntimeDirectory {run_dir}")
        self.assertTrue(conf["ssd-dir"].startswith(state_dir + "/"),
                        f"ssd-dir {conf['ssd-dir']} is outside StateDirectory {state_dir}")

    def test_sysusers_declares_the_user(self):
        with open(os.path.join(UNITS, "shelf.sysusers")) as f:
            lines = [l.split() for l in f if l.strip() and not l.startswith("#")]
        self.assertIn(["u", "shelf"], [l[:2] for l in lines])


def config_files(conf):
    """deploy/config/CONF and every CONF under deploy/kubernetes/."""
    found = [os.path.join(CONFIGS, conf)]
    found += sorted(glob.glob(os.path.join(SOURCE_DIR, "deploy", "kubernetes", "**", conf),
                              recursive=True))
    return found


class ConfigTest(unittest.TestCase):
    def check_config(self, name, conf):
        paths = config_files(conf)
        self.assertGreaterEqual(len(paths), 2, paths)
        for path in paths:
            with self.subTest(path=path):
                self.check_file(name, path)

    def check_file(self, name, path):
        exe = binary(name)
        proc = subprocess.run([exe, "--config", path, "--help"],
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(proc.returncode, 0,
                         f"{name} rejects {path}: {proc.stderr.strip()}")
        help_text = proc.stdout
        keys = config_keys(path, commented=True)
        self.assertGreater(len(keys), 5, f"{path} has hardly any keys")
        unknown = [k for k in keys if not re.search(rf"--{re.escape(k)}\b", help_text)]
        self.assertEqual(unknown, [], f"{path}: keys {name} --help does not list")

        # The commented-out examples must parse too: write them uncommented.
        with tempfile.NamedTemporaryFile("w", suffix=".conf") as tmp:
            for key, value in keys.items():
                if "secret-file" not in key and not key.startswith("tls-"):
                    tmp.write(f"{key} = {value}\n")
            tmp.flush()
            proc = subprocess.run([exe, "--config", tmp.name, "--help"],
                                  capture_output=True, text=True, timeout=30)
            self.assertEqual(proc.returncode, 0,
                             f"{name} rejects the commented examples of {path}: "
                             f"{proc.stderr.strip()}")

    def test_master_conf(self):
        self.check_config("shelf-master", "master.conf")

    def test_store_conf(self):
        self.check_config("shelf-store", "store.conf")

    def test_resp_conf(self):
        self.check_config("shelf-resp", "resp.conf")

    def test_bad_key_is_rejected(self):
        # Guards the method above: a config error must fail even with --help.
        for name in SERVICES:
            with tempfile.NamedTemporaryFile("w", suffix=".conf") as tmp:
                tmp.write("# fine\nno-such-key = 1\n")
                tmp.flush()
                proc = subprocess.run([binary(name), "--config", tmp.name, "--help"],
                                      capture_output=True, text=True, timeout=30)
                self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
                self.assertIn(f"{tmp.name}:2", proc.stderr)
                self.assertIn("unknown key", proc.stderr)


if __name__ == "__main__":
    unittest.main()
