"""Checks of the systemd units and the example config files in deploy/.

- `systemd-analyze verify` accepts both units, run on copies whose ExecStart
  names the binaries just built, with no warning about them (verify exits 0
  on an unknown key, so its output is read too).
- `systemd-analyze security --offline=true` rates each unit at or below
  EXPOSURE_MAX (systemd 252's scale, 0 best to 10): the sandboxing cannot
  wear away unnoticed. docs/operations.md gives the figures and what each
  unit leaves exposed, and why.
- Engines reach the node's sockets through the group `shelf-engines`, never
  through `shelf`, the group that reads the secret and credentials files.
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
# Absolute: the units' ExecStart= must name an absolute path.
BIN_DIR = os.path.abspath(os.environ.get("SHELF_BIN_DIR",
                                         os.path.join(SOURCE_DIR, "build", "bin")))
UNITS = os.path.join(SOURCE_DIR, "deploy", "systemd")
CONFIGS = os.path.join(SOURCE_DIR, "deploy", "config")
# binary -> its unit and example config.
SERVICES = {
    "shelf-master": ("shelf-master.service", "master.conf"),
    "shelf-store": ("shelf-store.service", "store.conf"),
    "shelf-resp": ("shelf-resp.service", "resp.conf"),
}
KEY_LINE = re.compile(r"^\s*(#\s*)?([a-z][a-z0-9-]*)\s*=\s*(.*?)\s*$")
# Highest `systemd-analyze security` exposure each unit may have (systemd
# 252; the units rate 1.1, 1.3 and 1.7). The store keeps the most: devices
# (RDMA), CAP_IPC_LOCK, netlink, a syscall deny list rather than an allow
# list, and no ProcSubset=pid or PrivateUsers (same-host clients, shm uids).
EXPOSURE_MAX = {"shelf-master": 1.2, "shelf-resp": 1.5, "shelf-store": 2.0}
# The group of the daemons (reads the 0640 root:shelf credential files) and
# the group of the engines (owns the run directories).
DAEMON_GROUP, ENGINE_GROUP = "shelf", "shelf-engines"
OVERALL = re.compile(r"Overall exposure level for \S+: (\d+\.\d+)")


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
        self.assertIn(["g", ENGINE_GROUP], [l[:2] for l in lines])

    def test_security_exposure_at_most_its_limit(self):
        analyze = shutil.which("systemd-analyze")
        self.assertIsNotNone(analyze, "systemd-analyze is missing: deploy/install-deps.sh "
                                      "installs it (Debian package systemd)")
        with tempfile.TemporaryDirectory() as tmp:
            for name, (unit, _) in SERVICES.items():
                with self.subTest(unit=unit):
                    copy = os.path.join(tmp, unit)
                    shutil.copyfile(os.path.join(UNITS, unit), copy)
                    limit = EXPOSURE_MAX[name]
                    # --threshold is in tenths; over it the exit status is not 0.
                    proc = subprocess.run(
                        [analyze, "security", "--offline=true", "--no-pager",
                         f"--threshold={round(limit * 10)}", copy],
                        capture_output=True, text=True, timeout=60)
                    output = proc.stdout + proc.stderr
                    m = OVERALL.search(output)
                    self.assertIsNotNone(m, f"no overall exposure for {unit}:\n{output}")
                    exposure = float(m.group(1))
                    flagged = "\n".join(l for l in output.splitlines() if l.startswith("✗"))
                    self.assertLessEqual(exposure, limit,
                                         f"{unit}: exposure {exposure} > {limit}:\n{flagged}")
                    self.assertEqual(proc.returncode, 0, output)

    def test_engines_reach_sockets_without_reading_credentials(self):
        units = {name: unit_settings(os.path.join(UNITS, unit))
                 for name, (unit, _) in SERVICES.items()}

        def values(name, key):
            return [v for _, k, v in units[name] if k == key]

        # The master has no socket for engines: the daemons' group alone.
        self.assertEqual(values("shelf-master", "Group"), [DAEMON_GROUP])
        self.assertEqual(values("shelf-master", "SupplementaryGroups"), [])
        for name in ("shelf-store", "shelf-resp"):
            # systemd hands RuntimeDirectory= to User:Group, so Group= is the
            # group that reaches the socket; `shelf` comes as a supplementary
            # group only, for the credential files.
            self.assertEqual(values(name, "Group"), [ENGINE_GROUP], name)
            self.assertEqual(values(name, "SupplementaryGroups"), [DAEMON_GROUP], name)
            self.assertEqual(values(name, "RuntimeDirectoryMode"), ["0750"], name)
        # The store's state (the SSD tier) stays out of the engines' reach.
        self.assertEqual(values("shelf-store", "StateDirectoryMode"), ["0700"])

        # Wherever a credential file is handed to a group, it is `shelf`;
        # wherever engines are told to join a group, `shelf-engines`.
        texts = {}
        for rel in ("docs/operations.md", "docs/security.md", "deploy/config/master.conf",
                    "deploy/config/store.conf", "deploy/config/resp.conf"):
            with open(os.path.join(SOURCE_DIR, rel)) as f:
                texts[rel] = f.read()
        chowned = [(rel, g) for rel, t in texts.items()
                   for g in re.findall(r"chown\s+[\w-]*:([\w-]+)\s+/etc/shelf/", t)]
        self.assertTrue(chowned, "no `chown USER:GROUP /etc/shelf/...` in the docs")
        self.assertEqual({g for _, g in chowned}, {DAEMON_GROUP}, chowned)
        joined = [(rel, g) for rel, t in texts.items()
                  for g in re.findall(r"usermod\s+-aG\s+([\w-]+)", t)
                  + re.findall(r"(?:to|in) the `([\w-]+)` group", t)]
        self.assertTrue(any(g == ENGINE_GROUP for _, g in joined), joined)
        self.assertEqual([(rel, g) for rel, g in joined if g != ENGINE_GROUP], [],
                         "engines must not be put in the group that reads credentials")


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
