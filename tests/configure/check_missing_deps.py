#!/usr/bin/env python3
"""Configures the project, with tests on, as if one test dependency were
missing, and checks that configuration fails naming the Debian packages
that bring it back (docs/testing.md, "Dependencies").

    check_missing_deps.py SOURCE_DIR CMAKE

pybind11 is hidden with CMAKE_DISABLE_FIND_PACKAGE_pybind11; libibverbs
(found through pkg-config) with a pkg-config wrapper that knows every
module but it. The error must name the packages, so a configure that
fails for another reason does not pass.
"""
import os
import shutil
import subprocess
import sys
import tempfile

CASES = [
    # (name, extra cmake arguments, hidden pkg-config module, packages named)
    ("pybind11", ["-DCMAKE_DISABLE_FIND_PACKAGE_pybind11=TRUE"], None,
     ["python3-pybind11", "pybind11-dev"]),
    ("libibverbs", [], "libibverbs", ["libibverbs-dev", "librdmacm-dev"]),
]


def configure(src, cmake, build, extra, env):
    return subprocess.run([cmake, "-S", src, "-B", build, "-G", "Ninja",
                           "-DSHELF_BUILD_TESTS=ON", *extra],
                          capture_output=True, text=True, env=env, timeout=240)


def pkg_config_hiding(tmp, module):
    real = shutil.which("pkg-config")
    wrapper = os.path.join(tmp, "pkg-config")
    with open(wrapper, "w") as f:
        f.write(f"""#!/bin/sh
for a in "$@"; do
  case "$a" in {module}|{module}[\\ \\<\\>=]*) exit 1 ;; esac
done
exec {real} "$@"
""")
    os.chmod(wrapper, 0o755)
    return wrapper


def main():
    src, cmake = sys.argv[1], sys.argv[2]
    failures = []
    for name, extra, module, packages in CASES:
        tmp = tempfile.mkdtemp(prefix="shelf-configure-")
        try:
            args = list(extra)
            if module:
                args.append("-DPKG_CONFIG_EXECUTABLE=" + pkg_config_hiding(tmp, module))
            r = configure(src, cmake, os.path.join(tmp, "build"), args, dict(os.environ))
            out = r.stdout + r.stderr
            if r.returncode == 0:
                failures.append(f"{name} hidden: configure succeeded (its tests would vanish)")
            elif not all(p in out for p in packages):
                failures.append(f"{name} hidden: the error does not name {packages}:\n{out[-2000:]}")
            else:
                print(f"{name} hidden: configure fails naming {', '.join(packages)}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit("FAIL:\n" + "\n".join(failures))


if __name__ == "__main__":
    main()
