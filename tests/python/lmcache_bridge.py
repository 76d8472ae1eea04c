"""A driver of a native connector as LMCache's multiprocess mode drives one
(LMCache/LMCache, lmcache/v1/distributed/l2_adapters/
native_connector_l2_adapter.py): the connector is built from the
`native_plugin` config (import module_path, class_name(**adapter_params)),
its six required methods are checked, a demux thread polls its eventfd,
drains completions and files each under the future id its submit returned;
buffers are byte memoryviews over tensor memory, as LMCache's
`MemoryObj.byte_array` (ctypes c_ubyte arrays at the tensor's data_ptr).
Used by test_lmcache.py and bench_lmcache.py."""

import ctypes
import importlib
import select
import threading

REQUIRED = ("event_fd", "submit_batch_get", "submit_batch_set", "submit_batch_exists",
            "drain_completions", "close")


def load_native_plugin(config):
    """What LMCache's factory does with a native_plugin L2 adapter config."""
    module = importlib.import_module(config["module_path"])
    connector = getattr(module, config["class_name"])(**config.get("adapter_params", {}))
    missing = [m for m in REQUIRED if not callable(getattr(connector, m, None))]
    if missing:
        raise TypeError(f"connector lacks {missing}")
    return connector


def byte_view(tensor):
    """LMCache's MemoryObj.byte_array: a c_ubyte array over the tensor's
    memory, as a memoryview of itemsize 1."""
    nbytes = tensor.numel() * tensor.element_size()
    array_type = ctypes.c_ubyte * nbytes
    return memoryview(array_type.from_address(tensor.data_ptr()))


class Bridge:
    """Submits batches and waits for their completions, as the adapter's
    demux thread delivers them."""

    def __init__(self, connector):
        self.connector = connector
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._done = {}
        self.unknown_ids = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._demux, daemon=True)
        self._thread.start()

    def _demux(self):
        poller = select.poll()
        poller.register(self.connector.event_fd(), select.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(100):
                continue
            completions = self.connector.drain_completions()
            with self._cv:
                for future_id, ok, error, results in completions:
                    if future_id in self._done:
                        self.unknown_ids.append(future_id)
                    self._done[future_id] = (ok, error, results)
                self._cv.notify_all()

    def wait(self, future_id, timeout=60):
        """(ok, error, results) of batch `future_id`."""
        with self._cv:
            if not self._cv.wait_for(lambda: future_id in self._done, timeout):
                raise TimeoutError(f"no completion for future {future_id}")
            return self._done.pop(future_id)

    def set(self, keys, views):
        return self.wait(self.connector.submit_batch_set(keys, views))

    def get(self, keys, views):
        return self.wait(self.connector.submit_batch_get(keys, views))

    def exists(self, keys):
        return self.wait(self.connector.submit_batch_exists(keys))

    def delete(self, keys):
        return self.wait(self.connector.submit_batch_delete(keys))

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self.connector.close()
