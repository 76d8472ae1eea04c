"""Consistency checks of the Kubernetes manifests in deploy/kubernetes/.

Each overlay (and the base) is rendered the way `kubectl kustomize` would,
by a small renderer below that knows the subset of kustomize the manifests
use (resources, components, namespace, labels, images, replicas,
configMapGenerator, JSON 6902 patches); where kubectl is installed, its own
rendering is checked the same way and compared. On every rendering:

- every object is well formed and unique;
- workload selectors match their pod templates; Services select pods, and
  their target ports, like every probe's port, exist in those containers;
- ConfigMaps and Secrets referenced by volumes, envFrom and env exist
  (`shelf-secret` is created by the operator, as docs/operations.md says),
  and so does every ConfigMap key mounted with subPath;
- the ports in the mounted shelf config files are the containers' ports;
- the store DaemonSet runs on the host network with IPC_LOCK, and its
  hugepages limit covers its DRAM segment;
- production runs three masters electing through a three-member etcd that
  takes only TLS clients with a certificate, and ships NetworkPolicies;
- production secures every channel: the masters serve gRPC over mutual TLS
  with a credentials file, stores and shelf-resp present client
  certificates and their own principals, stores serve data-plane TLS that
  shelf-resp and shelfctl verify, and the stores' etcd certificate is their
  own (read-only); every file those configs name lies in a Secret mounted
  with defaultMode 0400 into that container alone;
- every pod runs under the RuntimeDefault seccomp profile and mounts no
  service-account token, but for the store's node-labels init step.

Needs PyYAML (Debian: python3-yaml).
Run: python3 -m pytest -q tests/deploy/test_kubernetes.py
"""
import copy
import os
import re
import shutil
import subprocess
import unittest

import yaml

SOURCE_DIR = os.environ.get(
    "SHELF_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
K8S = os.path.join(SOURCE_DIR, "deploy", "kubernetes")
TARGETS = ["base", "overlays/dev", "overlays/production"]
# Secrets the operator creates by hand (never committed).
EXTERNAL_SECRETS = {"shelf-secret", "shelf-etcd-tls", "shelf-etcd-client", "shelf-store-data-tls",
                    "shelf-etcd-store-client", "shelf-master-tls", "shelf-credentials",
                    "shelf-store-principal", "shelf-resp-principal", "shelf-admin-principal"}
# Where a service-account token is mounted by hand (projected), and the one
# container that may see it.
API_TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
API_TOKEN_CONTAINERS = {("shelf-store", "node-labels")}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}
KNOWN_KUSTOMIZE_KEYS = {"apiVersion", "kind", "namespace", "labels", "resources", "components",
                        "configMapGenerator", "images", "replicas", "patches"}


class RenderError(Exception):
    pass


# ---------------------------------------------------------------- rendering

def load_yaml_documents(path):
    if not os.path.isfile(path):
        raise RenderError(f"{path}: listed in a kustomization but missing")
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def json_pointer(path):
    if not path.startswith("/"):
        raise RenderError(f"bad JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def apply_json_patch(obj, ops, where):
    for op in ops:
        parts = json_pointer(op["path"])
        parent = obj
        for p in parts[:-1]:
            try:
                parent = parent[int(p)] if isinstance(parent, list) else parent[p]
            except (KeyError, IndexError, ValueError):
                raise RenderError(f"{where}: {op['op']} {op['path']}: missing path")
        last = parts[-1]
        kind = op["op"]
        try:
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(index, op["value"])
                elif kind == "remove":
                    del parent[index]
                elif kind == "replace":
                    parent[index] = op["value"]
                elif kind == "test":
                    if parent[index] != op["value"]:
                        raise RenderError(f"{where}: test {op['path']} failed: "
                                          f"{parent[index]!r} != {op['value']!r}")
                else:
                    raise RenderError(f"{where}: unsupported op {kind}")
            else:
                if kind in ("remove", "replace", "test") and last not in parent:
                    raise RenderError(f"{where}: {kind} {op['path']}: missing path")
                if kind in ("add", "replace"):
                    parent[last] = op["value"]
                elif kind == "remove":
                    del parent[last]
                elif kind == "test":
                    if parent[last] != op["value"]:
                        raise RenderError(f"{where}: test {op['path']} failed: "
                                          f"{parent[last]!r} != {op['value']!r}")
                else:
                    raise RenderError(f"{where}: unsupported op {kind}")
        except (IndexError, ValueError):
            raise RenderError(f"{where}: {kind} {op['path']}: missing path")


def pod_template_specs(obj):
    """The pod specs (with their metadata) inside a workload, if any."""
    if obj.get("kind") in WORKLOADS:
        return [obj["spec"]["template"]]
    return []


def add_labels(obj, pairs, include_templates):
    obj.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
    if include_templates:
        for t in pod_template_specs(obj):
            t.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)


def set_image(obj, image):
    for t in pod_template_specs(obj):
        spec = t["spec"]
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            name, _, _ = c["image"].partition(":")
            if name == image["name"]:
                c["image"] = f"{image.get('newName', name)}:{image['newTag']}"


def render(directory):
    """The objects `kubectl kustomize DIRECTORY` would print (ConfigMaps
    without name hashes)."""
    path = os.path.join(directory, "kustomization.yaml")
    with open(path) as f:
        k = yaml.safe_load(f)
    unknown = set(k) - KNOWN_KUSTOMIZE_KEYS
    if unknown:
        raise RenderError(f"{path}: the test's renderer does not know {sorted(unknown)}; "
                          f"extend render() in {__file__}")
    objects = []
    for res in k.get("resources", []):
        full = os.path.normpath(os.path.join(directory, res))
        if os.path.isdir(full):
            objects += render(full)
        else:
            objects += load_yaml_documents(full)
    for comp in k.get("components", []):
        full = os.path.normpath(os.path.join(directory, comp))
        with open(os.path.join(full, "kustomization.yaml")) as f:
            ck = yaml.safe_load(f)
        if ck.get("kind") != "Component":
            raise RenderError(f"{full}: listed as a component but is {ck.get('kind')}")
        objects += render(full)

    for gen in k.get("configMapGenerator", []):
        data = {}
        for entry in gen.get("files", []):
            key, _, rel = entry.rpartition("=")
            full = os.path.join(directory, rel)
            if not os.path.isfile(full):
                raise RenderError(f"{path}: configMapGenerator file {rel} is missing")
            with open(full) as f:
                data[key or os.path.basename(rel)] = f.read()
        behavior = gen.get("behavior", "create")
        existing = [o for o in objects
                    if o["kind"] == "ConfigMap" and o["metadata"]["name"] == gen["name"]]
        if behavior == "create":
            if existing:
                raise RenderError(f"{path}: ConfigMap {gen['name']} created twice")
            objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": gen["name"]}, "data": data})
        elif not existing:
            raise RenderError(f"{path}: {behavior} of ConfigMap {gen['name']}, which no base has")
        elif behavior == "merge":
            existing[0]["data"].update(data)
        elif behavior == "replace":
            existing[0]["data"] = data

    for patch in k.get("patches", []):
        ops = load_yaml_documents(os.path.join(directory, patch["path"]))
        if len(ops) != 1 or not isinstance(ops[0], list):
            raise RenderError(f"{directory}/{patch['path']}: only JSON 6902 patches are "
                              f"supported by the test's renderer")
        target = patch["target"]
        hits = [o for o in objects if o["kind"] == target["kind"]
                and o["metadata"]["name"] == target["name"]]
        if not hits:
            raise RenderError(f"{path}: patch target {target['kind']}/{target['name']} missing")
        for o in hits:
            apply_json_patch(o, ops[0], f"{directory}/{patch['path']}")

    for rep in k.get("replicas", []):
        hits = [o for o in objects if o["metadata"]["name"] == rep["name"]
                and o["kind"] in WORKLOADS]
        if not hits:
            raise RenderError(f"{path}: replicas for missing {rep['name']}")
        for o in hits:
            o["spec"]["replicas"] = rep["count"]
    for image in k.get("images", []):
        for o in objects:
            set_image(o, image)
    for entry in k.get("labels", []):
        for o in objects:
            add_labels(o, entry["pairs"], entry.get("includeTemplates", False))
            if entry.get("includeSelectors"):
                raise RenderError(f"{path}: includeSelectors is not supported by the renderer")
    if "namespace" in k:
        for o in objects:
            if o["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
                o["metadata"]["namespace"] = k["namespace"]
            if o["kind"] == "ClusterRoleBinding":
                for s in o.get("subjects", []):
                    if s.get("kind") == "ServiceAccount":
                        s["namespace"] = k["namespace"]
    return objects


def kubectl_render(directory):
    proc = subprocess.run(["kubectl", "kustomize", directory], capture_output=True, text=True,
                          timeout=60)
    if proc.returncode != 0:
        raise RenderError(f"kubectl kustomize {directory}: {proc.stderr.strip()}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d is not None]


# ------------------------------------------------------------------ helpers

def by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def find(objects, kind, name):
    hits = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return hits[0] if hits else None


def containers(template, init=True):
    spec = template["spec"]
    return spec.get("containers", []) + (spec.get("initContainers", []) if init else [])


def port_exists(container, port):
    for p in container.get("ports", []):
        if port == p.get("name") or port == p.get("containerPort"):
            return True
    return False


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def config_text(objects, name_prefix, key):
    """The text of `key` in the ConfigMap whose name is name_prefix (plus a
    kustomize hash suffix, if any)."""
    for cm in by_kind(objects, "ConfigMap"):
        name = cm["metadata"]["name"]
        if (name == name_prefix or re.fullmatch(re.escape(name_prefix) + r"-[a-z0-9]{10}",
                                                name)) and key in cm.get("data", {}):
            return cm["data"][key]
    raise AssertionError(f"no ConfigMap {name_prefix} with key {key}")


def parse_conf(text):
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, value = line.partition("=")
            out[name.strip()] = value.strip()
    return out


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def parse_quantity(q):
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", str(q))
    assert m, f"quantity {q!r}"
    return int(m.group(1)) * units.get(m.group(2), 1)


def parse_size(s):
    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "K": 2**10, "M": 2**20,
             "G": 2**30, "T": 2**40, "": 1, "B": 1}
    m = re.fullmatch(r"(\d+)\s*([A-Za-z]*)", s)
    assert m and m.group(2) in units, f"size {s!r}"
    return int(m.group(1)) * units[m.group(2)]


def secret_of(workload, container, path):
    """(the `secret` of the volume that holds `path` in `container`, the key
    of that Secret the file is), or (None, None) when the path is mounted
    from something else; fails when nothing mounts it."""
    spec = workload["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for m in container.get("volumeMounts", []):
        mount = m["mountPath"]
        if path == mount or path.startswith(mount.rstrip("/") + "/"):
            v = volumes[m["name"]]
            if "secret" not in v:
                return None, None
            name = m.get("subPath") or os.path.relpath(path, mount)
            items = v["secret"].get("items")
            if items is not None:
                keys = {i["path"]: i["key"] for i in items}
                assert name in keys, f"{container['name']}: {path} is not among {items}"
                name = keys[name]
            return v["secret"], name
    raise AssertionError(f"{workload['metadata']['name']}/{container['name']}: "
                         f"nothing mounts {path}")


# What the production configs must set: mutual TLS and principals on gRPC,
# TLS on the data plane (tests/deploy/test_production_run.py runs them).
PRODUCTION_KEYS = {
    "master.conf": ["secret-file", "credentials", "tls-cert", "tls-key", "tls-ca",
                    "etcd-ca", "etcd-cert", "etcd-key"],
    "store.conf": ["secret-file", "credentials", "tls-ca", "tls-cert", "tls-key",
                   "etcd-ca", "etcd-cert", "etcd-key", "data-tls", "data-tls-cert",
                   "data-tls-key"],
    "resp.conf": ["secret-file", "credentials", "master-tls-ca", "master-tls-cert",
                  "master-tls-key", "data-tls", "data-tls-ca"],
    "shelfctl.conf": ["credentials", "tls-ca", "tls-cert", "tls-key", "secret-file", "data-tls",
                      "data-tls-ca"],
}


# ------------------------------------------------------------------- checks

class Checks:
    """Mixed into a TestCase; self.objects is one rendering."""

    def test_objects_well_formed_and_unique(self):
        seen = set()
        for o in self.objects:
            self.assertIn("apiVersion", o)
            self.assertIn("kind", o)
            self.assertTrue(o.get("metadata", {}).get("name"), o)
            ident = (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
            self.assertNotIn(ident, seen, f"duplicate {ident}")
            seen.add(ident)

    def test_workload_selectors_match_templates(self):
        for w in [o for o in self.objects if o["kind"] in WORKLOADS]:
            sel = w["spec"]["selector"]["matchLabels"]
            labels = w["spec"]["template"]["metadata"]["labels"]
            self.assertTrue(selects(sel, labels), f"{w['kind']}/{w['metadata']['name']}")
            if w["kind"] == "StatefulSet":
                svc = find(self.objects, "Service", w["spec"]["serviceName"])
                self.assertIsNotNone(svc, f"StatefulSet {w['metadata']['name']}: no Service "
                                          f"{w['spec']['serviceName']}")
                self.assertEqual(svc["spec"].get("clusterIP"), "None",
                                 f"Service {svc['metadata']['name']} must be headless")

    def test_services_select_pods_with_their_ports(self):
        workloads = [o for o in self.objects if o["kind"] in WORKLOADS]
        for svc in by_kind(self.objects, "Service"):
            name = svc["metadata"]["name"]
            ns = svc["metadata"].get("namespace")
            matched = [w for w in workloads if w["metadata"].get("namespace") == ns
                       and selects(svc["spec"].get("selector"),
                                   w["spec"]["template"]["metadata"]["labels"])]
            self.assertTrue(matched, f"Service {name} selects no pods")
            for port in svc["spec"]["ports"]:
                target = port.get("targetPort", port["port"])
                for w in matched:
                    self.assertTrue(
                        any(port_exists(c, target) for c in containers(w["spec"]["template"],
                                                                      init=False)),
                        f"Service {name}: port {target} not in {w['metadata']['name']}")

    def test_probe_ports_exist(self):
        for w in [o for o in self.objects if o["kind"] in WORKLOADS]:
            for c in containers(w["spec"]["template"]):
                for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                    p = c.get(probe)
                    if not p:
                        continue
                    action = p.get("httpGet") or p.get("tcpSocket") or p.get("grpc")
                    if action is None:
                        continue
                    self.assertTrue(port_exists(c, action["port"]),
                                    f"{w['metadata']['name']}/{c['name']} {probe}: "
                                    f"port {action['port']}")

    def test_references_resolve(self):
        configmaps = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o
                      for o in by_kind(self.objects, "ConfigMap")}
        secrets = {(o["metadata"].get("namespace"), o["metadata"]["name"])
                   for o in by_kind(self.objects, "Secret")}
        accounts = {(o["metadata"].get("namespace"), o["metadata"]["name"])
                    for o in by_kind(self.objects, "ServiceAccount")}
        for w in [o for o in self.objects if o["kind"] in WORKLOADS]:
            ns = w["metadata"].get("namespace")
            spec = w["spec"]["template"]["spec"]
            where = f"{w['kind']}/{w['metadata']['name']}"
            if "serviceAccountName" in spec:
                self.assertIn((ns, spec["serviceAccountName"]), accounts, where)
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            for claim in w["spec"].get("volumeClaimTemplates", []):
                volumes[claim["metadata"]["name"]] = claim

            def check_cm(name):
                self.assertIn((ns, name), configmaps, f"{where}: ConfigMap {name}")

            def check_secret(name):
                self.assertTrue((ns, name) in secrets or name in EXTERNAL_SECRETS,
                                f"{where}: Secret {name}")

            for v in volumes.values():
                if "configMap" in v:
                    check_cm(v["configMap"]["name"])
                if "secret" in v:
                    check_secret(v["secret"]["secretName"])
            for c in containers(w["spec"]["template"]):
                for ef in c.get("envFrom", []):
                    if "configMapRef" in ef:
                        check_cm(ef["configMapRef"]["name"])
                    if "secretRef" in ef:
                        check_secret(ef["secretRef"]["name"])
                for e in c.get("env", []):
                    src = e.get("valueFrom", {})
                    if "configMapKeyRef" in src:
                        check_cm(src["configMapKeyRef"]["name"])
                    if "secretKeyRef" in src:
                        check_secret(src["secretKeyRef"]["name"])
                for m in c.get("volumeMounts", []):
                    self.assertIn(m["name"], volumes, f"{where}/{c['name']}: volume {m['name']}")
                    v = volumes[m["name"]]
                    if "configMap" in v and "subPath" in m:
                        cm = configmaps[(ns, v["configMap"]["name"])]
                        self.assertIn(m["subPath"], cm.get("data", {}),
                                      f"{where}/{c['name']}: key {m['subPath']} of "
                                      f"ConfigMap {v['configMap']['name']}")

    def test_service_monitors_find_metrics_ports(self):
        for sm in by_kind(self.objects, "ServiceMonitor"):
            sel = sm["spec"]["selector"]

            def matches(labels):
                for k, v in sel.get("matchLabels", {}).items():
                    if labels.get(k) != v:
                        return False
                for expr in sel.get("matchExpressions", []):
                    self.assertEqual(expr["operator"], "In")
                    if labels.get(expr["key"]) not in expr["values"]:
                        return False
                return True

            services = [s for s in by_kind(self.objects, "Service")
                        if s["metadata"].get("namespace") == sm["metadata"].get("namespace")
                        and matches(s["metadata"].get("labels", {}))]
            names = sorted(s["metadata"]["name"] for s in services)
            self.assertEqual(names, ["shelf-master", "shelf-store"],
                             f"ServiceMonitor {sm['metadata']['name']}")
            for ep in sm["spec"]["endpoints"]:
                for s in services:
                    self.assertIn(ep["port"], [p["name"] for p in s["spec"]["ports"]])

    def store(self):
        ds = find(self.objects, "DaemonSet", "shelf-store")
        self.assertIsNotNone(ds)
        return ds

    def test_store_daemonset_host_network_and_ipc_lock(self):
        spec = self.store()["spec"]["template"]["spec"]
        self.assertIs(spec.get("hostNetwork"), True)
        self.assertEqual(spec.get("dnsPolicy"), "ClusterFirstWithHostNet")
        store = [c for c in spec["containers"] if c["name"] == "store"][0]
        self.assertIn("IPC_LOCK", store["securityContext"]["capabilities"]["add"])
        for p in store["ports"]:
            self.assertEqual(p.get("hostPort"), p["containerPort"], p)
        host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]
                      if "hostPath" in v}
        mounts = {m["name"]: m["mountPath"] for m in store["volumeMounts"]}
        conf = parse_conf(config_text(self.objects, "shelf-store-config", "store.conf"))
        # The SSD tier and the run dir are on the host, at the configured paths.
        self.assertIn(conf["ssd-dir"], [mounts[n] for n in host_paths])
        self.assertIn(conf["run-dir"], [mounts[n] for n in host_paths])

    def test_config_ports_match_container_ports(self):
        conf = parse_conf(config_text(self.objects, "shelf-store-config", "store.conf"))
        store = [c for c in self.store()["spec"]["template"]["spec"]["containers"]
                 if c["name"] == "store"][0]
        ports = {p["name"]: p["containerPort"] for p in store["ports"]}
        self.assertEqual(port_of(conf["listen"]), ports["data"])
        self.assertEqual(port_of(conf["admin-listen"]), ports["admin"])
        self.assertEqual(port_of(conf["metrics-listen"]), ports["metrics"])

        master_conf = parse_conf(config_text(self.objects, "shelf-master-config", "master.conf"))
        sts = find(self.objects, "StatefulSet", "shelf-master")
        master = sts["spec"]["template"]["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in master["ports"]}
        self.assertEqual(port_of(master_conf["metrics-listen"]), ports["metrics"])
        listen = [a for a in master["args"] if a.startswith("--listen=")]
        self.assertEqual(len(listen), 1)
        self.assertEqual(port_of(listen[0]), ports["grpc"])
        # Secret files live in the mounted Secret.
        for c, cf in ((master, master_conf), (store, conf)):
            mounts = [m["mountPath"] for m in c["volumeMounts"] if m["name"] == "secret"]
            self.assertTrue(any(cf["secret-file"].startswith(m + "/") for m in mounts),
                            f"{c['name']}: secret-file {cf['secret-file']} outside {mounts}")

    def test_pods_confined(self):
        for w in [o for o in self.objects if o["kind"] in WORKLOADS]:
            name = w["metadata"]["name"]
            spec = w["spec"]["template"]["spec"]
            self.assertEqual(spec.get("securityContext", {}).get("seccompProfile"),
                             {"type": "RuntimeDefault"}, f"{name}: pod seccompProfile")
            self.assertIs(spec.get("automountServiceAccountToken"), False,
                          f"{name}: automountServiceAccountToken")
            for c in containers(w["spec"]["template"]):
                profile = c.get("securityContext", {}).get("seccompProfile")
                self.assertIn(profile, (None, {"type": "RuntimeDefault"}), f"{name}/{c['name']}")
                self.assertIs(c.get("securityContext", {}).get("allowPrivilegeEscalation"), False,
                              f"{name}/{c['name']}")
                volumes = {v["name"]: v for v in spec.get("volumes", [])}
                for m in c.get("volumeMounts", []):
                    v = volumes.get(m["name"], {})
                    token = any("serviceAccountToken" in src
                                for src in v.get("projected", {}).get("sources", []))
                    if token or m["mountPath"].startswith(API_TOKEN_PATH):
                        self.assertIn((name, c["name"]), API_TOKEN_CONTAINERS,
                                      f"{name}/{c['name']} mounts a service-account token")

    def test_store_hugepages_cover_the_segment(self):
        store = [c for c in self.store()["spec"]["template"]["spec"]["containers"]
                 if c["name"] == "store"][0]
        conf = parse_conf(config_text(self.objects, "shelf-store-config", "store.conf"))
        limits = store["resources"].get("limits", {})
        requests = store["resources"].get("requests", {})
        volumes = self.store()["spec"]["template"]["spec"]["volumes"]
        hugepage_volumes = [v for v in volumes
                            if str(v.get("emptyDir", {}).get("medium", "")).startswith("HugePages")]
        if "hugepages-2Mi" in limits:
            self.assertEqual(requests.get("hugepages-2Mi"), limits["hugepages-2Mi"])
            self.assertGreaterEqual(parse_quantity(limits["hugepages-2Mi"]),
                                    parse_size(conf["dram-size"]))
            self.assertEqual(conf.get("hugepages"), "true")
            self.assertEqual(len(hugepage_volumes), 1)
        else:
            # A HugePages emptyDir without a hugepages request is rejected.
            self.assertEqual(hugepage_volumes, [])
            self.assertGreater(parse_quantity(limits["memory"]), parse_size(conf["dram-size"]))


class RenderedTarget(Checks):
    target = None
    use_kubectl = False

    @classmethod
    def setUpClass(cls):
        directory = os.path.join(K8S, cls.target)
        if cls.use_kubectl:
            if shutil.which("kubectl") is None:
                raise unittest.SkipTest("kubectl is not installed; the built-in renderer "
                                        "covers the same checks")
            cls.objects = kubectl_render(directory)
        else:
            cls.objects = render(directory)


def make_cases():
    cases = {}
    for target in TARGETS:
        for use_kubectl in (False, True):
            name = ("Kubectl" if use_kubectl else "Render") + "".join(
                p.capitalize() for p in re.split(r"[/_-]", target))
            cases[name] = type(name, (RenderedTarget, unittest.TestCase),
                               {"target": target, "use_kubectl": use_kubectl})
    return cases


globals().update(make_cases())


class LayoutTest(unittest.TestCase):
    def test_every_kustomization_file_exists(self):
        count = 0
        for root, _, files in os.walk(K8S):
            if "kustomization.yaml" not in files:
                continue
            count += 1
            with open(os.path.join(root, "kustomization.yaml")) as f:
                k = yaml.safe_load(f)
            listed = list(k.get("resources", [])) + list(k.get("components", []))
            listed += [p["path"] for p in k.get("patches", []) if "path" in p]
            for gen in k.get("configMapGenerator", []):
                listed += [e.rpartition("=")[2] for e in gen.get("files", [])]
            for rel in listed:
                full = os.path.join(root, rel)
                self.assertTrue(os.path.isfile(full) or os.path.isfile(
                    os.path.join(full, "kustomization.yaml")),
                    f"{root}/kustomization.yaml lists missing {rel}")
        self.assertGreaterEqual(count, 4)

    def test_every_yaml_parses(self):
        for root, _, files in os.walk(K8S):
            for name in files:
                if name.endswith((".yaml", ".yml")):
                    load_yaml_documents(os.path.join(root, name))

    def test_overlays_differ_as_documented(self):
        dev, prod = render(os.path.join(K8S, "overlays/dev")), render(
            os.path.join(K8S, "overlays/production"))
        self.assertEqual(find(dev, "StatefulSet", "shelf-master")["spec"]["replicas"], 1)
        self.assertIsNone(find(dev, "StatefulSet", "etcd"))
        self.assertEqual(find(prod, "StatefulSet", "shelf-master")["spec"]["replicas"], 3)
        self.assertEqual(find(prod, "StatefulSet", "etcd")["spec"]["replicas"], 3)
        self.assertTrue(by_kind(prod, "ServiceMonitor"))
        master_conf = parse_conf(config_text(prod, "shelf-master-config", "master.conf"))
        store_conf = parse_conf(config_text(prod, "shelf-store-config", "store.conf"))
        self.assertEqual(store_conf["master"],
                         "etcd://" + master_conf["etcd"] + "/" + master_conf["cluster"])
        etcd_hosts = [re.sub(r"^https://", "", u) for u in master_conf["etcd"].split(",")]
        self.assertEqual(len(etcd_hosts), 3)
        # The etcd members the masters name are the StatefulSet's pods.
        for i, host in enumerate(etcd_hosts):
            self.assertEqual(host, f"etcd-{i}.etcd:2379")
        # Dev stores point at the single master's stable name.
        dev_store = parse_conf(config_text(dev, "shelf-store-config", "store.conf"))
        self.assertEqual(dev_store["master"], "shelf-master-0.shelf-master:7000")

    def test_production_secures_etcd(self):
        prod = render(os.path.join(K8S, "overlays/production"))
        etcd = find(prod, "StatefulSet", "etcd")
        args = containers(etcd["spec"]["template"])[0]["args"]
        self.assertIn("--client-cert-auth", args)
        self.assertIn("--peer-client-cert-auth", args)
        for a in args:
            if a.startswith(("--listen-client-urls", "--advertise-client-urls",
                             "--initial-cluster=")):
                self.assertNotIn("http://", a, a)
        master_conf = parse_conf(config_text(prod, "shelf-master-config", "master.conf"))
        store_conf = parse_conf(config_text(prod, "shelf-store-config", "store.conf"))
        self.assertTrue(all(u.startswith("https://") for u in master_conf["etcd"].split(",")))
        # The masters' certificate may write etcd; the stores' is their own
        # (etcd-auth.sh lets its user read /shelf/ only).
        for kind, name, conf, secret_name in (
                ("StatefulSet", "shelf-master", master_conf, "shelf-etcd-client"),
                ("DaemonSet", "shelf-store", store_conf, "shelf-etcd-store-client")):
            w = find(prod, kind, name)
            c = w["spec"]["template"]["spec"]["containers"][0]
            for key in ("etcd-ca", "etcd-cert", "etcd-key"):
                secret, _ = secret_of(w, c, conf[key])
                self.assertEqual(secret["secretName"], secret_name, f"{name}: {key}")
                self.assertEqual(secret["defaultMode"], 0o400)
        policies = {p["metadata"]["name"]: p for p in by_kind(prod, "NetworkPolicy")}
        self.assertEqual(policies["default-deny-ingress"]["spec"]["podSelector"], {})
        etcd_policy = policies["etcd"]["spec"]
        self.assertEqual(etcd_policy["podSelector"]["matchLabels"],
                         etcd["spec"]["selector"]["matchLabels"])
        client_port_from = [rule.get("from", []) for rule in etcd_policy["ingress"]
                            if any(p["port"] == 2379 for p in rule.get("ports", []))]
        self.assertTrue(client_port_from)
        self.assertTrue(all(sources for sources in client_port_from),
                        "etcd's client port must not be open to every pod")
        self.assertIn("shelf-master", policies)

    def test_production_secures_grpc_data_plane_and_credentials(self):
        prod = render(os.path.join(K8S, "overlays/production"))
        confs = {key: parse_conf(config_text(prod, cm, key)) for cm, key in (
            ("shelf-master-config", "master.conf"), ("shelf-master-config", "shelfctl.conf"),
            ("shelf-store-config", "store.conf"), ("shelf-store-config", "resp.conf"))}
        for key, needed in PRODUCTION_KEYS.items():
            self.assertEqual([k for k in needed if k not in confs[key]], [], f"{key} lacks")
        for key, flag in (("store.conf", "data-tls"), ("resp.conf", "data-tls"),
                          ("shelfctl.conf", "data-tls")):
            self.assertEqual(confs[key][flag], "true", f"{key}: {flag}")

        sts = find(prod, "StatefulSet", "shelf-master")
        ds = find(prod, "DaemonSet", "shelf-store")
        master = sts["spec"]["template"]["spec"]["containers"][0]
        store, resp = ds["spec"]["template"]["spec"]["containers"]
        self.assertEqual((store["name"], resp["name"]), ("store", "resp"))
        # The master advertises the name its certificate holds, not its IP.
        self.assertIn("--advertise=$(POD_NAME).shelf-master:7000", master["args"])
        self.assertIn("POD_NAME", [e["name"] for e in master["env"]])

        # Every file a config names is in a Secret mounted 0400 into that
        # container. Each caller's principal (its credentials line and the
        # client certificate that names it) is a Secret of its own.
        credentials, client_certs = {}, {}
        for w, c, key in ((sts, master, "master.conf"), (sts, master, "shelfctl.conf"),
                          (ds, store, "store.conf"), (ds, resp, "resp.conf")):
            for flag, value in confs[key].items():
                if not value.startswith("/etc/"):
                    continue
                secret, item = secret_of(w, c, value)
                if secret is None:
                    continue  # a ConfigMap (node labels) or host path
                self.assertEqual(secret["defaultMode"], 0o400, f"{key}: {flag}")
                if flag == "credentials":
                    credentials[key] = secret["secretName"]
                if flag in ("tls-cert", "master-tls-cert"):
                    client_certs[key] = secret["secretName"]
        self.assertEqual(credentials, {"master.conf": "shelf-credentials",
                                       "shelfctl.conf": "shelf-admin-principal",
                                       "store.conf": "shelf-store-principal",
                                       "resp.conf": "shelf-resp-principal"})
        self.assertEqual(client_certs, {"master.conf": "shelf-master-tls",
                                        "shelfctl.conf": "shelf-admin-principal",
                                        "store.conf": "shelf-store-principal",
                                        "resp.conf": "shelf-resp-principal"})
        # shelf-resp and the masters see only the CA of the stores' data
        # certificate, never its key.
        for w, c in ((sts, master), (ds, resp)):
            secret, _ = secret_of(w, c, "/etc/shelf/data-tls/ca.crt")
            self.assertEqual(secret["items"], [{"key": "ca.crt", "path": "ca.crt"}])
        # No Secret of the masters' reaches the store's pod.
        ds_secrets = {v["secret"]["secretName"] for v in ds["spec"]["template"]["spec"]["volumes"]
                      if "secret" in v}
        self.assertFalse(ds_secrets & {"shelf-credentials", "shelf-master-tls",
                                       "shelf-etcd-client", "shelf-admin-principal"}, ds_secrets)
        # Neither container of the store's pod mounts the other's principal.
        for c, other in ((store, "shelf-resp-principal"), (resp, "shelf-store-principal")):
            mounted = {secret_of(ds, c, m["mountPath"] + "/x")[0]["secretName"]
                       for m in c["volumeMounts"] if m["name"] in {
                           v["name"] for v in ds["spec"]["template"]["spec"]["volumes"]
                           if "secret" in v and "items" not in v["secret"]}}
            self.assertNotIn(other, mounted, c["name"])

    def test_renderer_agrees_with_kubectl(self):
        if shutil.which("kubectl") is None:
            self.skipTest("kubectl is not installed")
        for target in TARGETS:
            directory = os.path.join(K8S, target)

            def names(objs):
                return sorted((o["kind"], re.sub(r"-[a-z0-9]{10}$", "", o["metadata"]["name"])
                               if o["kind"] == "ConfigMap" else o["metadata"]["name"])
                              for o in objs)
            self.assertEqual(names(render(directory)), names(kubectl_render(directory)), target)

    def test_renderer_rejects_a_broken_patch(self):
        # Guards the renderer: a patch whose `test` fails must not pass.
        obj = {"a": [{"name": "x"}]}
        with self.assertRaises(RenderError):
            apply_json_patch(copy.deepcopy(obj), [{"op": "test", "path": "/a/0/name",
                                                   "value": "y"}], "here")
        with self.assertRaises(RenderError):
            apply_json_patch(copy.deepcopy(obj), [{"op": "remove", "path": "/a/3"}], "here")


if __name__ == "__main__":
    unittest.main()
