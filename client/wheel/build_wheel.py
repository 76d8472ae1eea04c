#!/usr/bin/python3
"""Builds Shelf's two wheels from a build tree, with Debian's
`python3 -m build --no-isolation --wheel` and no index access:

- shelf_kv: client/wheel/shelf_kv staged with the modules of the system
  package that need nothing but shelf.Client (shelf.sglang), libshelf.so and every shared
  library it needs that a bare Debian 12 with python3 lacks (found with
  ldd, copied under their sonames, stripped, their run path set to $ORIGIN
  with patchelf), each library's Debian copyright file, and a BUNDLED.txt
  manifest;
- shelf_kv_mooncake: client/wheel/shelf_kv_mooncake with the `mooncake`
  package of client/python/compat/mooncake (pure Python).

    build_wheel.py --library <build>/lib/libshelf.so --version 0.1.0 \
        --stage <build>/wheel-stage --out <build>/dist

The CMake target `wheel` runs it. docs/python-wheel.md.
"""

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
COMPAT_MOONCAKE = HERE.parent / "python" / "compat" / "mooncake"
# The pure-Python modules of the system package that sit on shelf.Client
# alone: the wheel carries the same files.
SHARED_MODULES = [HERE.parent / "python" / "shelf" / name
                  for name in ("sglang.py", "_sglang_api.py", "_sglang_pages.py")]

# What a bare Debian 12 with python3 has, so the wheel leaves it out:
# glibc's libraries (libc6), the GCC runtime (libgcc-s1, libstdc++6: apt,
# in every Debian system, needs both), zlib (zlib1g) and OpenSSL 3
# (libssl3: python3's own ssl and hashlib need it). Loading a second
# OpenSSL beside python's would split its state, so it is never bundled.
BASE_SONAMES = frozenset({
    "linux-vdso.so.1", "ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libpthread.so.0",
    "libdl.so.2", "librt.so.1", "libresolv.so.2", "libstdc++.so.6", "libgcc_s.so.1",
    "libz.so.1", "libssl.so.3", "libcrypto.so.3",
})


def run(argv, **kwargs):
    return subprocess.run([str(a) for a in argv], check=True, text=True, **kwargs)


def needed_libraries(path):
    """soname -> resolved path of every library `path` loads (ldd's
    transitive closure), base libraries included."""
    out = run(["ldd", path], stdout=subprocess.PIPE).stdout
    libs = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(\S+)\s+\(", line)
        if m:
            libs[m.group(1)] = m.group(2)
        elif "not found" in line:
            sys.exit(f"build_wheel: {path} needs a library ldd cannot find: {line.strip()}")
    return libs


def debian_package(path):
    """The Debian package that installed `path` (with usrmerge, dpkg may
    know it under /lib or /usr/lib), or None."""
    real = os.path.realpath(path)
    candidates = {path, real}
    for p in list(candidates):
        if p.startswith("/usr/lib/"):
            candidates.add(p[len("/usr"):])
        elif p.startswith("/lib/"):
            candidates.add("/usr" + p)
    for p in candidates:
        r = subprocess.run(["dpkg", "-S", p], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True)
        if r.returncode == 0 and r.stdout:
            return r.stdout.split(":", 1)[0].strip()
    return None


def package_version(package):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    return r.stdout.strip() if r.returncode == 0 else "?"


def stage_library(src, dest, rpath):
    shutil.copyfile(src, dest)
    os.chmod(dest, 0o755)
    run(["strip", "--strip-unneeded", dest])
    run(["patchelf", "--set-rpath", rpath, dest])


def build(stage, out, name):
    """python3 -m build on `stage`; the wheel's path."""
    for old in out.glob(f"{name}-*.whl"):
        old.unlink()
    run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", out, stage],
        stdout=subprocess.DEVNULL)
    wheels = sorted(out.glob(f"{name}-*.whl"))
    if len(wheels) != 1:
        sys.exit(f"build_wheel: expected one {name} wheel in {out}, found {wheels}")
    return wheels[0]


def stage_client(library, version, stage):
    """The shelf_kv stage; the number of libraries bundled."""
    shutil.copytree(HERE / "shelf_kv", stage,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info"))
    (stage / "VERSION").write_text(version + "\n")
    for module in SHARED_MODULES:
        shutil.copyfile(module, stage / "shelf" / module.name)
    libs_dir = stage / "shelf" / "_libs"
    licenses = libs_dir / "licenses"
    licenses.mkdir(parents=True)

    stage_library(library, libs_dir / "libshelf.so", "$ORIGIN")
    manifest = ["# soname  debian-package  version", "libshelf.so  (shelf)  " + version]
    for soname, path in sorted(needed_libraries(library).items()):
        if soname in BASE_SONAMES:
            continue
        stage_library(path, libs_dir / soname, "$ORIGIN")
        package = debian_package(path)
        if package is None:
            sys.exit(f"build_wheel: no Debian package owns {path}: its licence is unknown")
        copyright_file = pathlib.Path("/usr/share/doc") / package.split(":")[0] / "copyright"
        if not copyright_file.exists():
            sys.exit(f"build_wheel: {package} has no {copyright_file}")
        shutil.copyfile(copyright_file, licenses / (package.split(":")[0] + ".copyright"))
        manifest.append(f"{soname}  {package}  {package_version(package)}")
    (libs_dir / "BUNDLED.txt").write_text("\n".join(manifest) + "\n")

    # Every bundled library must now resolve inside _libs/ or to the base.
    for lib in sorted(libs_dir.glob("*.so*")):
        for soname, path in needed_libraries(lib).items():
            if soname not in BASE_SONAMES and pathlib.Path(path).parent != libs_dir:
                sys.exit(f"build_wheel: {lib.name} loads {soname} from {path}, outside the wheel")
    return len(manifest) - 2


def stage_mooncake(version, stage):
    shutil.copytree(HERE / "shelf_kv_mooncake", stage,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info"))
    (stage / "VERSION").write_text(version + "\n")
    shutil.copytree(COMPAT_MOONCAKE, stage / "mooncake",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--library", required=True, help="the build's libshelf.so")
    ap.add_argument("--version", required=True)
    ap.add_argument("--stage", required=True, help="scratch folder (emptied first)")
    ap.add_argument("--out", required=True, help="where the wheels are written")
    args = ap.parse_args()

    stage = pathlib.Path(args.stage).resolve()
    out = pathlib.Path(args.out).resolve()
    if stage.exists():
        shutil.rmtree(stage)
    out.mkdir(parents=True, exist_ok=True)
    bundled = stage_client(pathlib.Path(args.library), args.version, stage / "shelf_kv")
    client = build(stage / "shelf_kv", out, "shelf_kv")
    print(f"build_wheel: {client} ({client.stat().st_size / 1e6:.1f} MB, "
          f"{bundled} bundled libraries)")
    stage_mooncake(args.version, stage / "shelf_kv_mooncake")
    shim = build(stage / "shelf_kv_mooncake", out, "shelf_kv_mooncake")
    print(f"build_wheel: {shim} ({shim.stat().st_size / 1e3:.1f} kB)")


if __name__ == "__main__":
    main()
