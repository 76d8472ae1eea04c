"""Device memory handed to the Mooncake layer and to shelf.Client on a
machine without a GPU: recognised through the CUDA driver the process
loaded (here a simulated one, tests/python/simulated_cuda_driver.c, whose
"device memory" the host cannot touch), refused with -600 / an error, and
never read or written from the host, in a build with CUDA or without.

Each case runs in a child process: a layer that touched the memory would
kill it with SIGSEGV, and the test reports that instead of dying with it."""

import os
import pathlib
import subprocess
import sys

import pytest

import shelf

from conftest import Cluster

DRIVER = os.environ.get("SHELF_SIMULATED_CUDA_DRIVER", "")
COMPAT = pathlib.Path(shelf.__file__).resolve().parent.parent / "compat"

pytestmark = pytest.mark.skipif(
    not DRIVER, reason="SHELF_SIMULATED_CUDA_DRIVER not set (CTest sets it)")


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(stores=1, dram_bytes=64 << 20)
    yield c
    c.stop()


def run_child(code):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(COMPAT), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, (
        f"child exited {out.returncode} (-11: it touched device memory)\n{out.stderr}")
    assert "child ok" in out.stdout, out.stdout


PRELUDE = f"""
import ctypes
# Loaded as a framework loads the CUDA driver, before it makes device memory.
drv = ctypes.CDLL({DRIVER!r}, mode=ctypes.RTLD_GLOBAL)
drv.simulated_cuda_device_alloc.restype = ctypes.c_void_p
drv.simulated_cuda_device_alloc.argtypes = [ctypes.c_size_t]
dev = drv.simulated_cuda_device_alloc(1 << 20)
assert dev
"""


def test_the_mooncake_layer_refuses_device_memory_it_cannot_move(cluster):
    run_child(PRELUDE + f"""
import numpy as np
from mooncake.store import MooncakeDistributedStore, ReplicateConfig
s = MooncakeDistributedStore()
assert s.setup("h", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", {cluster.master!r}) == 0
# vLLM's register_kv_caches: the cache's storage. No device this process
# can use: -600, the memory untouched.
assert s.register_buffer(dev, 1 << 20) == -600
# Never registered, so every transfer naming it is -600 too.
assert s.batch_put_from_multi_buffers(["d/k"], [[dev, dev + 4096]], [[4096, 4096]],
                                      ReplicateConfig()) == [-600]
assert s.batch_get_into_multi_buffers(["d/k"], [[dev]], [[4096]]) == [-600]
assert s.put_from("d/k", dev, 4096) == -600
assert s.batch_get_into(["d/k"], [dev], [4096]) == [-600]
# Host memory beside it still moves.
host = np.arange(4096, dtype=np.uint8)
assert s.register_buffer(host.ctypes.data, host.nbytes) == 0
assert s.put_from("d/host", host.ctypes.data, host.nbytes) == 0
assert s.get("d/host") == host.tobytes()
assert s.close() == 0
print("child ok")
""")


def test_the_client_refuses_device_memory_registered_as_host(cluster):
    run_child(PRELUDE + f"""
import shelf
c = shelf.Client([{cluster.master!r}])
try:
    c.register_buffer(dev, size=1 << 20)
except shelf.InvalidArgumentError as e:
    assert "device memory" in str(e), e
else:
    raise AssertionError("device memory registered as host memory")
# As a GPU buffer: refused too, with no device this process can use.
try:
    c.register_buffer(dev, size=1 << 20, gpu=True)
except shelf.Error as e:
    assert "CUDA" in str(e), e
else:
    raise AssertionError("GPU buffer registered without a usable device")
c.close()
print("child ok")
""")
