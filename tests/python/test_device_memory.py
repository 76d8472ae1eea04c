"""Device memory handed to the Mooncake layer and to shelf.Client on a
machine without a GPU: recognised through the CUDA driver the process
loaded (here a simulated one, tests/python/simulated_cuda_driver.c, whose
"device memory" the host cannot touch), and never read or written from the
host, in a build with CUDA or without. The Mooncake layer moves vLLM's
multi-buffer blocks of device memory through the driver's copies; with a
driver that cannot copy (the same simulation built without them), it
refuses with -600, as shelf.Client refuses what it cannot stage.

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
NO_COPIES_DRIVER = os.environ.get("SHELF_SIMULATED_CUDA_DRIVER_NO_COPIES", "")
COMPAT = pathlib.Path(shelf.__file__).resolve().parent.parent / "compat"

pytestmark = pytest.mark.skipif(
    not DRIVER or not NO_COPIES_DRIVER,
    reason="SHELF_SIMULATED_CUDA_DRIVER(_NO_COPIES) not set (CTest sets them)")


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


def prelude(driver):
    return f"""
import ctypes
# Loaded as a framework loads the CUDA driver, before it makes device memory.
drv = ctypes.CDLL({driver!r}, mode=ctypes.RTLD_GLOBAL)
drv.simulated_cuda_device_alloc.restype = ctypes.c_void_p
drv.simulated_cuda_device_alloc.argtypes = [ctypes.c_size_t]
dev = drv.simulated_cuda_device_alloc(1 << 20)
assert dev
"""


PRELUDE = prelude(DRIVER)


def test_the_mooncake_layer_refuses_device_memory_it_cannot_move(cluster):
    run_child(prelude(NO_COPIES_DRIVER) + f"""
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


def test_vllm_multi_buffer_blocks_of_device_memory_round_trip(cluster):
    # vLLM's FlashAttention layout on a GPU: per key a K piece and a V piece,
    # far apart in the cache's storage, registered once by its base.
    run_child(PRELUDE + f"""
import os
from mooncake.store import MooncakeDistributedStore, ReplicateConfig
drv.cuMemcpyHtoD_v2.argtypes = [ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_size_t]
drv.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_size_t]
piece, n = 16 << 10, 8
k_seg, v_seg = dev, dev + (512 << 10)
want = os.urandom(1 << 20)
assert drv.cuMemcpyHtoD_v2(dev, want, len(want)) == 0
s = MooncakeDistributedStore()
assert s.setup("h", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", {cluster.master!r}) == 0
assert s.register_buffer(dev, 1 << 20) == 0
keys = [f"dev/fa/{{i}}" for i in range(n)]
addrs = [[k_seg + i * piece, v_seg + i * piece] for i in range(n)]
sizes = [[piece, piece] for _ in range(n)]
assert s.batch_put_from_multi_buffers(keys, addrs, sizes, ReplicateConfig()) == [0] * n
assert s.batch_is_exist(keys) == [1] * n
# Each block is its K piece then its V piece, as on the host.
for i in (0, n - 1):
    block = s.get(keys[i])
    assert block == want[i * piece:(i + 1) * piece] + \
        want[(512 << 10) + i * piece:(512 << 10) + (i + 1) * piece], i
# Clear the device, load, and read it back through the driver.
assert drv.cuMemcpyHtoD_v2(dev, bytes(1 << 20), 1 << 20) == 0
assert s.batch_get_into_multi_buffers(keys, addrs, sizes) == [2 * piece] * n
got = ctypes.create_string_buffer(1 << 20)
assert drv.cuMemcpyDtoH_v2(got, dev, 1 << 20) == 0
for i in range(n):
    for seg in (0, 512 << 10):
        at = seg + i * piece
        assert got.raw[at:at + piece] == want[at:at + piece], (i, seg)
# One piece per key (FlashInfer, MLA): through the driver too.
assert s.batch_put_from_multi_buffers(["dev/one"], [[dev]], [[piece]], ReplicateConfig()) == [0]
assert s.batch_get_into_multi_buffers(["dev/one"], [[dev + piece]], [[piece]]) == [piece]
# Pieces too small for the block: -600, nothing written.
assert s.batch_get_into_multi_buffers(keys[:1], [[dev]], [[piece]]) == [-600]
# A key whose pieces mix host and device memory: -600.
host = ctypes.create_string_buffer(piece)
assert s.register_buffer(ctypes.addressof(host), piece) == 0
assert s.batch_put_from_multi_buffers(["dev/mixed"], [[dev, ctypes.addressof(host)]],
                                      [[piece, piece]], ReplicateConfig()) == [-600]
assert s.unregister_buffer(dev) == 0
assert s.batch_get_into_multi_buffers(keys[:1], addrs[:1], sizes[:1]) == [-600]
assert s.close() == 0
print("child ok")
""")
