"""The shelf_kv wheel as an engine's operator installs it: into a fresh
venv (python3 -m venv) with pip and no package index, then used from a
directory outside the source tree with no PYTHONPATH, against a real
cluster. Also checks what the wheel carries: every bundled library
resolves inside the wheel or to the base set below (docs/python-wheel.md).

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


def _wheel():
    wheels = sorted(WHEEL_DIR.glob("shelf_kv-*-py3-none-linux_x86_64.whl"))
    assert wheels, f"no shelf_kv wheel in {WHEEL_DIR}: build it with the `wheel` target"
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
    """A fresh venv with the wheel installed by pip, no index."""
    root = tmp_path_factory.mktemp("venv")
    env = _clean_env()
    subprocess.run(["/usr/bin/python3", "-m", "venv", root / "env"], check=True, env=env,
                   cwd=root)
    python = root / "env" / "bin" / "python"
    r = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-cache-dir", _wheel()],
                       env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    assert r.returncode == 0, r.stdout
    return python


def _site_package(python):
    out = subprocess.run([python, "-c", "import shelf, os; print(os.path.dirname(shelf.__file__))"],
                         env=_clean_env(), cwd="/", check=True, stdout=subprocess.PIPE, text=True)
    return pathlib.Path(out.stdout.strip())


def test_wheel_name_says_any_cpython_3_on_x86_64_linux():
    assert re.fullmatch(r"shelf_kv-[0-9.]+-py3-none-linux_x86_64\.whl", _wheel().name)


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
