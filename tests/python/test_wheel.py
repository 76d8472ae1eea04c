"""The shelf_kv and shelf_kv_mooncake wheels as an engine's operator
installs them: into a fresh venv (python3 -m venv) with pip and no package
index, then used from a directory outside the source tree with no
PYTHONPATH, against a real cluster: the Client, and Mooncake Store's API as
SGLang's and vLLM's connectors call it on host memory. Also checks what the
wheel carries: every bundled library resolves inside the wheel or to the
base set below (docs/python-wheel.md).

    SHELF_WHEEL_DIR=<build>/dist PYTHONPATH=<build>/python \
        SHELF_BIN_DIR=<build>/bin /usr/bin/python3 -m pytest -q tests/python/test_wheel.py
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

WHEEL_DIR = pathlib.Path(os.environ.get("SHELF_WHEEL_DIR", "build/dist"))
SOURCE_DIR = pathlib.Path(__file__).resolve().parents[2]

# What a bare Debian 12 with python3 has (glibc, the GCC runtime that apt
# needs, zlib, python3's OpenSSL 3): the only libraries a bundled one may
# load from outside the wheel.
BASE_SONAMES = {
    "linux-vdso.so.1", "ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libpthread.so.0",
    "libdl.so.2", "librt.so.1", "libresolv.so.2", "libstdc++.so.6", "libgcc_s.so.1",
    "libz.so.1", "libssl.so.3", "libcrypto.so.3",
}

# The newest symbol versions the bundled libraries ask of the system's
# glibc and libstdc++: the floor docs/python-wheel.md states.
GLIBC_FLOOR = (2, 34)
GLIBCXX_FLOOR = (3, 4, 30)

# Run by the venv's python from an empty directory: a put/get round trip,
# zero-copy reads, batches and a registered buffer; prints what it saw.
CLIENT_SCRIPT = r"""
import json, sys
import shelf
master = sys.argv[1]
out = {"module": shelf.__file__, "python": sys.version.split()[0]}
with shelf.Client(master, timeout_ms=20000) as c:
    c.put(b"wheel/a", b"A" * 1000)
    out["get"] = c.get(b"wheel/a") == b"A" * 1000
    out["miss"] = c.get(b"wheel/none") is None
    buf = bytearray(4096)
    out["get_into"] = c.get_into(b"wheel/a", buf)
    statuses = c.batch_put([b"wheel/b%d" % i for i in range(8)], [bytes([i]) * 512 for i in range(8)])
    out["batch_put"] = [s.ok for s in statuses]
    out["batch_get"] = c.batch_get([b"wheel/b0", b"wheel/none", b"wheel/b7"]) == [b"\0" * 512, None, b"\7" * 512]
    out["match_prefix"] = c.match_prefix([b"wheel/b0", b"wheel/b1", b"wheel/none"])
    region = bytearray(1 << 16)
    h = c.register_buffer(region)
    region[:3] = b"xyz"
    c.put_from(b"wheel/r", h, offset=0, size=3)
    out["registered"] = c.get_into(b"wheel/r", h, offset=100) == 3 and region[100:103] == b"xyz"
    c.unregister_buffer(h)
    try:
        c.get(b"")
    except shelf.InvalidArgumentError as e:
        out["error"] = e.code_name
    out["removed"] = c.remove(b"wheel/a")
print(json.dumps(out))
"""

# The Mooncake-layer sequences of SGLang's HiCache backend and vLLM's
# MooncakeStoreConnector on host memory, as their current sources make the
# calls (docs/mooncake-compat.md lists them): `import mooncake.store`, the
# allocator's shared memory, the eight-argument setup with Mooncake's
# keywords, registration, zero-copy batches and multi-buffer blocks.
MOONCAKE_SCRIPT = r"""
import ctypes, json, sys
from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator, ReplicateConfig
master = sys.argv[1]
out = {"module": sys.modules["mooncake.store"].__file__}
out["group_ids"] = hasattr(ReplicateConfig, "group_ids")
page, pages = 64 << 10, 16
alloc = MooncakeHostMemAllocator()
pool = alloc.alloc(page * pages)
store = MooncakeDistributedStore()
out["setup"] = store.setup("localhost", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master, None,
                           tenant_id="default", enable_ssd_offload=False)
out["register"] = store.register_buffer(pool, page * pages)
for i in range(pages):
    ctypes.memset(pool + i * page, 65 + i, page)
keys = ["sglang/%d" % i for i in range(pages // 2)]
config = ReplicateConfig()
config.replica_num = 1
out["put"] = store.batch_put_from(keys, [pool + i * page for i in range(len(keys))],
                                  [page] * len(keys), config)
out["exist"] = store.batch_is_exist(keys + ["sglang/none"])
half = pages // 2
out["get"] = store.batch_get_into(keys, [pool + (half + i) * page for i in range(len(keys))],
                                  [page] * len(keys))
out["same"] = all(ctypes.string_at(pool + (half + i) * page, page) == bytes([65 + i]) * page
                  for i in range(len(keys)))
# vLLM: each key a K and a V piece of one registered region.
vkeys = ["vllm/%d" % i for i in range(4)]
ptrs = [[pool + (2 * i) * page, pool + (2 * i + 1) * page] for i in range(4)]
sizes = [[page, page] for _ in range(4)]
out["multi_put"] = store.batch_put_from_multi_buffers(vkeys, ptrs, sizes, ReplicateConfig())
ctypes.memset(pool, 0, page * 8)
out["multi_get"] = store.batch_get_into_multi_buffers(vkeys, ptrs, sizes)
out["multi_same"] = ctypes.string_at(pool + 3 * page, page) == bytes([65 + 3]) * page
desc = store.batch_get_replica_desc(vkeys[:1])
out["desc"] = [d.is_memory_replica() for d in desc.get(vkeys[0], [])]
out["removed"] = store.batch_remove(keys + vkeys)
out["unregister"] = store.unregister_buffer(pool)
out["close"] = store.close()
out["free"] = alloc.free(pool)
print(json.dumps(out))
"""


def _wheel():
    wheels = sorted(WHEEL_DIR.glob("shelf_kv-*-py3-none-linux_x86_64.whl"))
    assert wheels, f"no shelf_kv wheel in {WHEEL_DIR}: build it with the `wheel` target"
    return wheels[-1]


def _mooncake_wheel():
    wheels = sorted(WHEEL_DIR.glob("shelf_kv_mooncake-*-py3-none-any.whl"))
    assert wheels, f"no shelf_kv_mooncake wheel in {WHEEL_DIR}"
    return wheels[-1]


def _clean_env():
    """The environment of an operator's shell: no PYTHONPATH, no override
    of the library, no index."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "SHELF_", "PIP_", "VIRTUAL_ENV"))}
    env["PIP_NO_INDEX"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh venv with both wheels installed by pip, no index."""
    root = tmp_path_factory.mktemp("venv")
    env = _clean_env()
    subprocess.run(["/usr/bin/python3", "-m", "venv", root / "env"], check=True, env=env,
                   cwd=root)
    python = root / "env" / "bin" / "python"
    r = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-cache-dir", _wheel(),
                        _mooncake_wheel()],
                       env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    assert r.returncode == 0, r.stdout
    return python


def _site_package(python):
    out = subprocess.run([python, "-c", "import shelf, os; print(os.path.dirname(shelf.__file__))"],
                         env=_clean_env(), cwd="/", check=True, stdout=subprocess.PIPE, text=True)
    return pathlib.Path(out.stdout.strip())


def test_wheel_names_say_any_cpython_3():
    assert re.fullmatch(r"shelf_kv-[0-9.]+-py3-none-linux_x86_64\.whl", _wheel().name)
    assert re.fullmatch(r"shelf_kv_mooncake-[0-9.]+-py3-none-any\.whl", _mooncake_wheel().name)


def test_installed_client_talks_to_a_cluster_from_outside_the_tree(venv, cluster, tmp_path):
    work = tmp_path / "elsewhere"
    work.mkdir()
    script = work / "engine.py"
    script.write_text(CLIENT_SCRIPT)
    r = subprocess.run([venv, script, cluster.master], env=_clean_env(), cwd=work,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    module = pathlib.Path(seen["module"])
    assert SOURCE_DIR not in module.parents, seen
    assert venv.parent.parent in module.parents, seen
    assert seen["get"] and seen["miss"] and seen["batch_get"] and seen["registered"], seen
    assert seen["get_into"] == 1000
    assert seen["batch_put"] == [True] * 8
    assert seen["match_prefix"] == 2
    assert seen["error"] == "INVALID_ARGUMENT"
    assert seen["removed"] is True


def _run_in(venv, directory, code, *args):
    directory.mkdir(exist_ok=True)
    script = directory / "engine.py"
    script.write_text(code)
    return subprocess.run([venv, script, *args], env=_clean_env(), cwd=directory,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120)


def test_mooncake_sequences_of_sglang_and_vllm_on_the_installed_wheels(venv, cluster, tmp_path):
    r = _run_in(venv, tmp_path / "elsewhere", MOONCAKE_SCRIPT, cluster.master)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert venv.parent.parent in pathlib.Path(seen["module"]).parents, seen
    assert seen["group_ids"] is True
    assert seen["setup"] == 0 and seen["register"] == 0, seen
    assert seen["put"] == [0] * 8 and seen["exist"] == [1] * 8 + [0], seen
    assert seen["get"] == [64 << 10] * 8 and seen["same"], seen
    assert seen["multi_put"] == [0] * 4 and seen["multi_get"] == [128 << 10] * 4, seen
    assert seen["multi_same"] and seen["desc"] == [True], seen
    assert seen["removed"] == [0] * 12, seen
    assert seen["unregister"] == 0 and seen["close"] == 0 and seen["free"] == 0, seen


def test_the_shim_refuses_to_load_beside_mooncakes_own_package(venv, tmp_path):
    # pip cannot keep both from being installed; the shim says so at import.
    site = _site_package(venv).parent
    fake = site / "mooncake_transfer_engine-0.3.7.dist-info"
    fake.mkdir()
    try:
        (fake / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: mooncake-transfer-engine\nVersion: 0.3.7\n")
        r = _run_in(venv, tmp_path / "elsewhere", "import mooncake.store\n")
        assert r.returncode != 0
        assert "Mooncake's own package 'mooncake-transfer-engine' is installed too" in r.stderr
        assert "pip uninstall" in r.stderr
    finally:
        (fake / "METADATA").unlink()
        fake.rmdir()
    assert _run_in(venv, tmp_path / "elsewhere", "import mooncake.store\n").returncode == 0


def test_bundled_libraries_resolve_inside_the_wheel_or_to_the_base(venv):
    libs = _site_package(venv) / "_libs"
    bundled = sorted(p for p in libs.iterdir() if ".so" in p.name)
    assert (libs / "libshelf.so") in bundled
    names = {p.name for p in bundled}
    for lib in bundled:
        out = subprocess.run(["ldd", lib], check=True, stdout=subprocess.PIPE, text=True,
                             env=_clean_env()).stdout
        for line in out.splitlines():
            assert "not found" not in line, f"{lib.name}: {line.strip()}"
            m = re.match(r"\s*(\S+)\s+=>\s+(\S+)", line)
            if not m:
                continue
            soname, path = m.group(1), pathlib.Path(m.group(2))
            if soname in BASE_SONAMES:
                continue
            assert path.parent == libs, f"{lib.name} loads {soname} from {path}"
            assert soname in names
    # Nothing of CUDA is carried: the runtime is loaded when present.
    assert not [n for n in names if "cuda" in n], names
    # Each bundled library's Debian copyright file rides with it.
    manifest = (libs / "BUNDLED.txt").read_text().splitlines()
    packages = {line.split()[1] for line in manifest[2:]}
    licences = {p.name for p in (libs / "licenses").iterdir()}
    assert {p.split(":")[0] + ".copyright" for p in packages} <= licences
    assert len(manifest) - 2 == len(names) - 1  # every library but libshelf is listed


def test_the_wheel_loads_no_library_from_the_build_tree(venv):
    # The installed package uses its own libshelf: a build tree's is never
    # on its path (SHELF_LIBRARY unset, rpath $ORIGIN).
    out = subprocess.run(
        [venv, "-c", "import shelf._native as n, sys; print(n.lib._name)"],
        env=_clean_env(), cwd="/", check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    assert out.endswith("/shelf/_libs/libshelf.so") and str(SOURCE_DIR) not in out, out
    maps = subprocess.run(
        [venv, "-c", "import shelf; print(open('/proc/self/maps').read())"],
        env=_clean_env(), cwd="/", check=True, stdout=subprocess.PIPE, text=True).stdout
    loaded = {line.split()[-1] for line in maps.splitlines()
              if line.split() and ".so" in line.split()[-1]}
    assert not [p for p in loaded if "/build" in p and "libshelf" in p], loaded
    assert sys.version_info >= (3, 9)


def _newest_version(libs, prefix):
    newest = ()
    for lib in libs:
        out = subprocess.run(["objdump", "-T", lib], check=True, stdout=subprocess.PIPE,
                             text=True).stdout
        for v in re.findall(prefix + r"_([0-9.]+)", out):
            newest = max(newest, tuple(int(x) for x in v.split(".")))
    return newest


def test_glibc_and_libstdcxx_floor_is_the_documented_one(venv):
    libs = [p for p in (_site_package(venv) / "_libs").iterdir() if ".so" in p.name]
    assert _newest_version(libs, "GLIBC") == GLIBC_FLOOR
    assert _newest_version(libs, "GLIBCXX") == GLIBCXX_FLOOR
