"""Runs the production Kubernetes overlay as rendered, on this machine.

deploy/kubernetes/overlays/production is rendered the way `kubectl kustomize`
does (the renderer of test_kubernetes.py), and its pods' processes are
started from what it renders: the config files of its ConfigMaps and the
containers' commands and arguments, each container with the files its volume
mounts would hold and as the user its security context names. The test
makes the Secrets the operator would (docs/operations.md, "Secrets of the
production overlay"): CAs and certificates with openssl, the cluster secret
and a credentials file with the principals the configs expect. Only three
things are rewritten, each explicitly below:

- addresses: every `NAME:PORT` and `0.0.0.0:PORT` of the rendered files
  becomes a free port on 127.0.0.1 (the masters' names `localhost`, which
  their test certificate holds), and etcd runs one member instead of three;
- file paths: a path under a container's mount point moves under that
  container's own directory, where the mounted files are written (Secrets
  0400, plus the group read Kubernetes adds for the pod's fsGroup);
- sizes: the store's DRAM segment (60 GiB in production) is 64 MiB here.

Then: etcd with TLS and client certificates, etcd-auth.sh run on it (the
stores' certificate may only read), three masters electing a leader (gRPC
with mutual TLS and principals), two store pods finding the leader through
etcd with their read-only certificate (data-plane TLS), shelf-resp beside
the first, a SET and a GET through shelf-resp that cross the stores' TLS
data plane, and shelfctl, as the configured admin, reading the cluster's
status and the value over mutual TLS. The test fails if the rendered
configs lack mutual TLS, credentials or data-plane TLS, or if any process
fails.

Needs root (each container runs as its pod's user, as Kubernetes runs it),
openssl, etcd and etcdctl (Debian: etcd-server, etcd-client), and the built
shelf-master, shelf-store, shelf-resp and shelfctl.
Run (as root):
  SHELF_BIN_DIR=build/bin SHELF_SOURCE_DIR=. python3 -m pytest -q tests/deploy
"""
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_kubernetes as k8s  # noqa: E402  (the overlay renderer)

SOURCE_DIR = k8s.SOURCE_DIR
BIN_DIR = os.path.abspath(os.environ.get("SHELF_BIN_DIR",
                                         os.path.join(SOURCE_DIR, "build", "bin")))
OVERLAY = os.path.join(k8s.K8S, "overlays", "production")
ETCD, ETCDCTL = "/usr/bin/etcd", "/usr/bin/etcdctl"
START_TIMEOUT_S = 30
# The primary group of a container user whose pod names none: the image's
# (deploy/docker/Dockerfile makes shelf 10001:10001; etcd's image has no
# user 10002, so group 0).
IMAGE_GIDS = {10001: 10001}
# The sizes this machine cannot give.
SIZE_REWRITES = {"store.conf": {"dram-size": "64MiB"}}
# Two store nodes: resp.conf asks for two replicas on distinct nodes.
# The principals of the credentials file: the stores', shelf-resp's and the
# admin's of shelfctl.conf, each also in a Secret of its own with a client
# certificate that names it. A store principal names the node ids it may
# register (a store's --node-id is its node's name); one principal serves
# every pod of the DaemonSet.
TENANT, NODES = "team-a", ["gpu-node-1", "gpu-node-2"]
PRINCIPALS = [("shelf-store", "store", "-", "nodes=gpu-node-*"),
              ("shelf-resp", "gateway", TENANT, ""), ("shelf-admin", "admin", "-", "")]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "2", "-keyout", f"{name}.key", "-out", f"{name}.crt",
            "-subj", f"/CN={name}", cwd=d)


def issue(d, name, cn, ca, extensions):
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write(extensions)
    openssl("x509", "-req", "-days", "2", "-in", f"{name}.csr", "-CA", f"{ca}.crt",
            "-CAkey", f"{ca}.key", "-CAcreateserial", "-out", f"{name}.crt",
            "-extfile", f"{name}.ext", cwd=d)


def make_secrets(d):
    """{Secret name: {key: bytes}}: what the operator creates, as
    docs/operations.md says, with test names in the certificates."""
    for ca in ("grpc-ca", "etcd-ca", "data-ca"):
        make_ca(d, ca)
    client = "extendedKeyUsage=clientAuth\n"
    issue(d, "master", "shelf-master", "grpc-ca",
          "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost\n")
    for name, _, _, _ in PRINCIPALS:
        issue(d, f"principal-{name}", name, "grpc-ca", client)
    issue(d, "etcd", "etcd", "etcd-ca",
          "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for user in ("root", "shelf-master", "shelf-store"):
        issue(d, f"etcd-{user}", user, "etcd-ca", client)
    issue(d, "data", "shelf-store", "data-ca",
          "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n")

    def read(name):
        with open(os.path.join(d, name), "rb") as f:
            return f.read()

    def tls(cert, ca):
        return {"ca.crt": read(f"{ca}.crt"), "tls.crt": read(f"{cert}.crt"),
                "tls.key": read(f"{cert}.key")}

    lines = {name: f"{name} {role} {tenant} {base64.b64encode(os.urandom(24)).decode()} "
                   f"{options}\n" for name, role, tenant, options in PRINCIPALS}

    def principal(name):
        return {"credentials": lines[name].encode(), **tls(f"principal-{name}", "grpc-ca")}

    return {
        "shelf-secret": {"secret": base64.b64encode(os.urandom(32)) + b"\n"},
        "shelf-credentials": {"credentials": "".join(lines.values()).encode()},
        "shelf-store-principal": principal("shelf-store"),
        "shelf-resp-principal": principal("shelf-resp"),
        "shelf-admin-principal": principal("shelf-admin"),
        "shelf-master-tls": tls("master", "grpc-ca"),
        "shelf-etcd-tls": tls("etcd", "etcd-ca"),
        "shelf-etcd-client": tls("etcd-shelf-master", "etcd-ca"),
        "shelf-etcd-store-client": tls("etcd-shelf-store", "etcd-ca"),
        "shelf-store-data-tls": tls("data", "data-ca"),
    }


class Container:
    """One container of a rendered pod: its directory stands for its
    filesystem, and it runs as the user its security context names."""

    def __init__(self, root, workload, container, env):
        self.root = root
        self.workload = workload
        self.spec = container
        self.name = container["name"]
        self.env = dict(env)
        pod = workload["spec"]["template"]["spec"]
        pod_sc, sc = pod.get("securityContext", {}), container.get("securityContext", {})
        self.uid = sc.get("runAsUser", pod_sc.get("runAsUser", 0))
        self.gid = sc.get("runAsGroup", pod_sc.get("runAsGroup", IMAGE_GIDS.get(self.uid, 0)))
        self.fs_group = pod_sc.get("fsGroup")
        self.volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for claim in workload["spec"].get("volumeClaimTemplates", []):
            self.volumes[claim["metadata"]["name"]] = {"persistentVolumeClaim": {}}
        self.mounts = sorted((m["mountPath"] for m in container.get("volumeMounts", [])),
                             key=len, reverse=True)
        os.makedirs(root, mode=0o755)
        os.chmod(root, 0o755)

    def path(self, p):
        """Where this container's `p` is on this machine."""
        return self.root + p

    def rewrite_paths(self, text):
        """`text` with each path under one of the container's mounts moved
        under its directory."""
        for m in self.mounts:
            text = re.sub(r"(?<![\w./-])" + re.escape(m) + r"(?=$|[/\s\"',])",
                          lambda _: self.path(m), text, flags=re.M)
        return text

    def own(self, path, mode):
        # What kubelet does with fsGroup: the group, and read for it.
        group = self.fs_group if self.fs_group is not None else 0
        os.chown(path, 0, group)
        os.chmod(path, mode | (0o040 if self.fs_group is not None else 0))

    def populate(self, secrets, config_text):
        """Writes what each volume mount holds; config_text(key) is a config
        file of a ConfigMap, already rewritten."""
        for m in self.spec.get("volumeMounts", []):
            v = self.volumes[m["name"]]
            target = self.path(m["mountPath"])
            if "secret" in v:
                name = v["secret"]["secretName"]
                assert name in secrets, f"{self.name}: the overlay mounts Secret {name}, which " \
                                        f"neither docs/operations.md nor this test makes"
                os.makedirs(target, mode=0o755)
                items = v["secret"].get("items") or [{"key": k, "path": k}
                                                     for k in secrets[name]]
                for item in items:
                    f = os.path.join(target, item["path"])
                    with open(f, "wb") as out:
                        out.write(secrets[name][item["key"]])
                    self.own(f, v["secret"].get("defaultMode", 0o644))
            elif "configMap" in v:
                assert "subPath" in m, f"{self.name}: ConfigMap {m['name']} without subPath"
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                with open(target, "w") as out:
                    out.write(config_text(m["subPath"]))
                self.own(target, 0o644)
            elif "hostPath" in v:
                # DirectoryOrCreate: made 0755, owned by root.
                os.makedirs(target, mode=0o755)
            else:  # emptyDir, a volume claim: the pod's fsGroup may write
                os.makedirs(target, mode=0o755)
                if self.fs_group is not None:
                    os.chown(target, 0, self.fs_group)
                    os.chmod(target, 0o2775)
                else:
                    os.chmod(target, 0o777)

    def argv(self):
        """command + args, $(VAR) expanded from the env, paths rewritten."""
        words = list(self.spec.get("command", [])) + list(self.spec.get("args", []))
        words = [re.sub(r"\$\((\w+)\)", lambda m: self.env[m.group(1)], w) for w in words]
        return [self.rewrite_paths(w) for w in words]

    def popen_args(self):
        env = {"PATH": f"{BIN_DIR}:/usr/bin:/bin", "HOME": self.root, **self.env}
        groups = [self.fs_group] if self.fs_group is not None else []
        return dict(env=env, cwd=self.root, user=self.uid, group=self.gid, extra_groups=groups,
                    stdin=subprocess.DEVNULL, start_new_session=True)


def rewrite_addresses(text, addresses):
    for old, new in addresses.items():
        text = re.sub(r"(?<![\w.-])" + re.escape(old) + r"(?![\w])", new, text)
    return text


def set_keys(text, values):
    for key, value in values.items():
        text, n = re.subn(rf"^{re.escape(key)}\s*=.*$", f"{key} = {value}", text, flags=re.M)
        assert n == 1, f"no `{key}` to rewrite"
    return text


def http_get(address, path, timeout=2):
    with urllib.request.urlopen(f"http://{address}{path}", timeout=timeout) as r:
        return r.read().decode()


def resp_command(port, *args, timeout=10):
    """One RESP command; the reply (bytes, or None for a nil), or a
    RuntimeError for an error reply."""
    out = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(out)
        f = s.makefile("rb")
        line = f.readline()
        if line.startswith(b"-"):
            raise RuntimeError(line.decode().strip())
        if line.startswith((b"+", b":")):
            return line[1:].strip()
        if line.startswith(b"$"):
            n = int(line[1:])
            if n < 0:
                return None
            data = f.read(n + 2)
            return data[:n]
        raise RuntimeError(f"unexpected reply {line!r}")


def metric(text, name, **labels):
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


class ProductionOverlayRunsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root: each container runs as its pod's user "
                                    "(runAsUser, fsGroup), as Kubernetes runs it")
        for tool in ("openssl", ETCD, ETCDCTL) + tuple(
                os.path.join(BIN_DIR, b) for b in ("shelf-master", "shelf-store", "shelf-resp",
                                                   "shelfctl")):
            if shutil.which(tool) is None:
                raise AssertionError(f"{tool} is missing (deploy/install-deps.sh; build the "
                                     f"binaries, or set SHELF_BIN_DIR)")

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="shelf-production-")
        os.chmod(self.dir, 0o755)
        self.procs = []
        self.objects = k8s.render(OVERLAY)
        self.confs = {}
        for cm, key in (("shelf-master-config", "master.conf"),
                        ("shelf-master-config", "shelfctl.conf"),
                        ("shelf-store-config", "store.conf"),
                        ("shelf-store-config", "resp.conf")):
            self.confs[key] = k8s.config_text(self.objects, cm, key)

    def tearDown(self):
        for name, p, _ in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for name, p, _ in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------- helpers

    def workload(self, kind, name):
        w = k8s.find(self.objects, kind, name)
        self.assertIsNotNone(w, f"{kind}/{name} is not rendered")
        return w

    def container(self, w, name):
        hits = [c for c in k8s.containers(w["spec"]["template"], init=False)
                if c["name"] == name]
        self.assertEqual(len(hits), 1, f"{w['metadata']['name']}: container {name}")
        return hits[0]

    def start(self, name, container, addresses, conf_key=None, files=None):
        """Starts `container` with `addresses` rewritten; `files` are
        {path: text} its init steps would have written."""
        def config_text(key):
            text = self.confs[key]
            text = set_keys(text, SIZE_REWRITES.get(key, {}))
            return container.rewrite_paths(rewrite_addresses(text, addresses))

        container.populate(self.secrets, config_text)
        for path, text in (files or {}).items():
            with open(container.path(path), "w") as f:
                f.write(text)
            os.chmod(container.path(path), 0o644)
        argv = [rewrite_addresses(w, addresses) for w in container.argv()]
        rendered = " ".join(argv)
        for key in ([conf_key] if conf_key else []):
            rendered += "\n" + config_text(key)
        # Nothing of the cluster's own addresses is left.
        self.assertIsNone(re.search(r"0\.0\.0\.0|\.etcd:|\.shelf-master:|\$\(\w+\)", rendered),
                          f"{name}: not rewritten:\n{rendered}")
        log = open(os.path.join(self.dir, f"{name}.log"), "wb")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                             **container.popen_args())
        log.close()
        self.procs.append((name, p, os.path.join(self.dir, f"{name}.log")))
        return p

    def log(self, name):
        with open(os.path.join(self.dir, f"{name}.log"), "rb") as f:
            return f.read().decode(errors="replace")[-4000:]

    def all_alive(self):
        for name, p, _ in self.procs:
            self.assertIsNone(p.poll(), f"{name} exited with {p.returncode}:\n{self.log(name)}")

    def wait_for(self, what, probe, timeout=START_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            self.all_alive()
            try:
                if probe():
                    return
            except Exception as e:  # not up yet
                last = e
            time.sleep(0.2)
        logs = "\n".join(f"--- {n}\n{self.log(n)}" for n, _, _ in self.procs)
        self.fail(f"{what} within {timeout} s (last: {last})\n{logs}")

    def run_as(self, container, argv, text=True, timeout=30):
        """Runs argv in `container`, as `kubectl exec` would."""
        kw = container.popen_args()
        kw.pop("start_new_session")
        kw["stdin"] = subprocess.DEVNULL
        return subprocess.run(argv, capture_output=True, text=text, timeout=timeout, **kw)

    # ---------------------------------------------------------------- test

    def test_rendered_configs_serve_set_get_and_status_over_mtls(self):
        # Before anything runs: the rendered configs turn every protection on.
        for key, needed in k8s.PRODUCTION_KEYS.items():
            conf = k8s.parse_conf(self.confs[key])
            missing = [k for k in needed if k not in conf]
            self.assertEqual(missing, [], f"the rendered {key} lacks {missing}")
        for key in ("store.conf", "resp.conf", "shelfctl.conf"):
            self.assertEqual(k8s.parse_conf(self.confs[key])["data-tls"], "true", key)

        pki = os.path.join(self.dir, "pki")
        os.mkdir(pki)
        self.secrets = make_secrets(pki)

        etcd_sts = self.workload("StatefulSet", "etcd")
        master_sts = self.workload("StatefulSet", "shelf-master")
        store_ds = self.workload("DaemonSet", "shelf-store")
        masters = master_sts["spec"]["replicas"]
        self.assertEqual(masters, 3)

        # Addresses: the cluster's names, on this machine.
        etcd_port, etcd_peer, etcd_metrics = free_port(), free_port(), free_port()
        master_ports = [free_port() for _ in range(masters)]
        shared = {f"etcd-{i}.etcd:2379": f"127.0.0.1:{etcd_port}" for i in range(3)}
        shared.update({f"shelf-master-{i}.shelf-master:7000": f"localhost:{master_ports[i]}"
                       for i in range(masters)})

        # etcd, one member, from the rendered arguments.
        etcd_c = Container(os.path.join(self.dir, "etcd-0"), etcd_sts,
                           self.container(etcd_sts, "etcd"), {"POD_NAME": "etcd-0"})
        etcd_c.spec = dict(etcd_c.spec)
        etcd_c.spec["args"] = [
            "--initial-cluster=etcd-0=https://etcd-0.etcd:2380"
            if a.startswith("--initial-cluster=") else a for a in etcd_c.spec["args"]]
        for flag in ("--client-cert-auth", "--peer-client-cert-auth"):
            self.assertIn(flag, etcd_c.spec["args"])
        self.start("etcd", etcd_c, {**shared, "etcd-0.etcd:2380": f"127.0.0.1:{etcd_peer}",
                                    "0.0.0.0:2379": f"127.0.0.1:{etcd_port}",
                                    "0.0.0.0:2380": f"127.0.0.1:{etcd_peer}",
                                    "0.0.0.0:2381": f"127.0.0.1:{etcd_metrics}"})
        self.wait_for("etcd healthy",
                      lambda: '"true"' in http_get(f"127.0.0.1:{etcd_metrics}", "/health"))

        # etcd-auth.sh, with the root certificate, as docs/operations.md says.
        etcdctl_env = {"ETCDCTL_API": "3", "ETCDCTL_ENDPOINTS": f"https://127.0.0.1:{etcd_port}",
                       "ETCDCTL_CACERT": os.path.join(pki, "etcd-ca.crt")}

        def etcdctl_as(user, *args):
            env = {**os.environ, **etcdctl_env, "PATH": f"{os.path.dirname(ETCDCTL)}:/bin",
                   "ETCDCTL_CERT": os.path.join(pki, f"etcd-{user}.crt"),
                   "ETCDCTL_KEY": os.path.join(pki, f"etcd-{user}.key")}
            return subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=60)

        script = os.path.join(OVERLAY, "etcd-auth.sh")
        for attempt in range(2):  # a second run changes nothing
            done = etcdctl_as("root", "/bin/sh", script)
            self.assertEqual(done.returncode, 0, f"etcd-auth.sh (run {attempt + 1}): "
                                                 f"{done.stdout}{done.stderr}")

        # The masters, each as its pod: POD_IP and POD_NAME from the downward API.
        master_metrics = []
        for i in range(masters):
            c = Container(os.path.join(self.dir, f"shelf-master-{i}"), master_sts,
                          self.container(master_sts, "master"),
                          {"POD_IP": "127.0.0.1", "POD_NAME": f"shelf-master-{i}"})
            metrics = free_port()
            master_metrics.append(f"127.0.0.1:{metrics}")
            self.start(f"shelf-master-{i}", c,
                       {**shared, "127.0.0.1:7000": f"127.0.0.1:{master_ports[i]}",
                        "0.0.0.0:9400": f"127.0.0.1:{metrics}"}, "master.conf")
            if i == 0:
                master0 = c

        def leader():
            return any('"role":"leader"' in http_get(a, "/health") for a in master_metrics)
        self.wait_for("a master elected leader through etcd", leader)

        # A store pod on each of two nodes (the host network), shelf-resp
        # beside the first store (one gateway is enough for the test).
        stores = []
        for node in NODES:
            env = {"NODE_NAME": node}
            store_c = Container(os.path.join(self.dir, f"{node}-store"), store_ds,
                                self.container(store_ds, "store"), env)
            ports = {p: free_port() for p in ("data", "admin", "metrics")}
            # The labels file is what the node-labels init step writes (it
            # asks the Kubernetes API for the node's labels).
            self.start(f"{node}-store", store_c,
                       {**shared, "0.0.0.0:7100": f"127.0.0.1:{ports['data']}",
                        "0.0.0.0:7101": f"127.0.0.1:{ports['admin']}",
                        "0.0.0.0:9401": f"127.0.0.1:{ports['metrics']}"}, "store.conf",
                       files={"/var/run/shelf-node/labels": f"node={node},zone=a\n"})
            stores.append((store_c, ports, f"127.0.0.1:{ports['metrics']}"))
        resp_c = Container(os.path.join(self.dir, f"{NODES[0]}-resp"), store_ds,
                           self.container(store_ds, "resp"), {"NODE_NAME": NODES[0]})
        resp_port, resp_admin = free_port(), free_port()
        self.start(f"{NODES[0]}-resp", resp_c,
                   {**shared, "127.0.0.1:6379": f"127.0.0.1:{resp_port}",
                    "0.0.0.0:9402": f"127.0.0.1:{resp_admin}"}, "resp.conf")
        for _, _, metrics in stores:
            self.wait_for("each store registered (found the leader through etcd with its "
                          "read-only certificate, over mutual TLS, as its principal)",
                          lambda: '"ok"' in http_get(metrics, "/health"))

        # SET and GET through shelf-resp, across the store's TLS data plane.
        value = os.urandom(256 << 10)

        def set_value():
            return resp_command(resp_port, b"SET", b"rendered", value) == b"OK"
        self.wait_for("SET through shelf-resp", set_value)
        self.assertEqual(resp_command(resp_port, b"GET", b"rendered"), value)
        # shelf-resp (uid 10001) may not map a store's segment (root's): the
        # bytes crossed TCP to both stores, which serve it over TLS alone.
        for _, _, metrics in stores:
            text = http_get(metrics, "/metrics")
            self.assertGreaterEqual(metric(text, "shelf_store_written_bytes_total",
                                           tier="dram", transport="tcp"), len(value))
        read = sum(metric(http_get(m, "/metrics"), "shelf_store_read_bytes_total", tier="dram",
                          transport="tcp") for _, _, m in stores)
        self.assertGreaterEqual(read, len(value))
        with socket.create_connection(("127.0.0.1", stores[0][1]["data"]), timeout=5) as s:
            s.settimeout(1)
            try:
                hello = s.recv(64)
            except socket.timeout:
                hello = b""
            self.assertEqual(hello, b"", "the store greeted a plaintext connection: no TLS")

        # shelfctl in a master's pod, as its config says: status, and the
        # value (kept in shelf-resp's tenant) over the data plane.
        ctl = [os.path.join(BIN_DIR, "shelfctl"), "--config",
               master0.path("/etc/shelf/shelfctl.conf")]
        with open(master0.path("/etc/shelf/shelfctl.conf")) as f:
            ctl_conf = f.read()
        status = self.run_as(master0, ctl + ["--json", "status"])
        self.assertEqual(status.returncode, 0, status.stdout + status.stderr)
        nodes = json.loads(status.stdout)["nodes"]
        self.assertEqual(sorted(n["node_id"] for n in nodes if n["state"] == "live"), NODES)
        got = self.run_as(master0, ctl + ["get", f"{TENANT}/rendered", "-"], text=False)
        self.assertEqual(got.returncode, 0, got.stderr)
        self.assertEqual(got.stdout, value + b"\x01")  # shelf-resp's trailer (docs/resp.md)

        # What holds: without a client certificate the masters take no call;
        # the store's principal may not read the status; the stores' etcd
        # certificate reads the leader key but cannot write it.
        no_cert = os.path.join(master0.root, "no-cert.conf")
        with open(no_cert, "w") as f:
            f.write("".join(l for l in ctl_conf.splitlines(True)
                            if not re.match(r"(tls-cert|tls-key)\s*=", l)))
        os.chmod(no_cert, 0o644)
        refused = self.run_as(master0, [ctl[0], "--config", no_cert, "--timeout", "3s",
                                        "status"])
        # 4: UNAVAILABLE, the handshake refused.
        self.assertEqual(refused.returncode, 4, refused.stdout + refused.stderr)
        principal = stores[0][0].path("/etc/shelf/principal")
        as_store = self.run_as(master0, ctl + [
            "--credentials", f"{principal}/credentials", "--tls-cert", f"{principal}/tls.crt",
            "--tls-key", f"{principal}/tls.key", "status"])
        self.assertEqual(as_store.returncode, 5, as_store.stdout + as_store.stderr)
        self.assertIn("PERMISSION_DENIED", as_store.stderr)
        leader_key = "/shelf/shelf/leader"
        read = etcdctl_as("shelf-store", ETCDCTL, "get", "--prefix", "/shelf/")
        self.assertEqual(read.returncode, 0, read.stderr)
        self.assertIn(leader_key, read.stdout)
        write = etcdctl_as("shelf-store", ETCDCTL, "put", leader_key, "127.0.0.1:1")
        self.assertNotEqual(write.returncode, 0, write.stdout)
        self.assertIn("permission denied", write.stderr)
        self.all_alive()


if __name__ == "__main__":
    unittest.main()
