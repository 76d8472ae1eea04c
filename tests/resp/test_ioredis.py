"""A Node.js client nobody here wrote: ioredis from the npm registry, pinned
by tests/resp/node/package-lock.json and installed by deploy/install-deps.sh,
runs tests/resp/node/ioredis_check.js against a real shelf-resp."""

import pathlib
import shutil
import subprocess

NODE_DIR = pathlib.Path(__file__).parent / "node"


def test_ioredis_binary_values_pipeline_mget_del_and_errors(gateway, unique):
    # install-deps.sh installs node and ioredis: their absence is a failure.
    node = shutil.which("node")
    assert node, "node is missing: run deploy/install-deps.sh"
    assert (NODE_DIR / "node_modules" / "ioredis" / "package.json").exists(), \
        f"ioredis is missing under {NODE_DIR}: run deploy/install-deps.sh"
    out = subprocess.run([node, str(NODE_DIR / "ioredis_check.js"), gateway.host,
                          str(gateway.port), unique.decode()],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "ok", out.stdout
