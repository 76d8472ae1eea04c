// shelf.lmcache.ShelfConnector: NativeConnector (client/native_connector.h) as
// LMCache's multiprocess mode loads a `native_plugin` L2 adapter:
//
//   --l2-adapter '{"type": "native_plugin", "module_path": "shelf.lmcache",
//                  "class_name": "ShelfConnector",
//                  "adapter_params": {"master": "10.0.0.1:7000"}}'
//
// LMCache builds ShelfConnector(**adapter_params) and wraps it in its
// NativeConnectorL2Adapter, which polls event_fd(), calls
// drain_completions() and matches the future ids the submit_* calls
// returned. docs/integrations.md.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/native_connector.h"
#include "client/python/module.h"

namespace shelf::python {
namespace {

class ShelfConnector {
 public:
  ShelfConnector(const std::string& master, const std::string& secret_file,
                 const std::string& credentials, const std::string& principal,
                 const std::string& tenant, uint32_t workers, uint32_t queue_max,
                 uint64_t timeout_ms, uint32_t transfer_threads, bool allow_shm) {
    NativeConnectorConfig config;
    config.master = master;
    config.secret_file = secret_file;
    config.credentials = credentials;
    config.principal = principal;
    config.tenant = tenant;
    config.workers = workers;
    config.queue_max = queue_max;
    config.timeout_ms = timeout_ms;
    config.transfer_threads = transfer_threads;
    config.allow_shm = allow_shm;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = OpenNativeConnector(config, &connector_);
    }
    // Arguments out of range are shelf.InvalidArgumentError, a ValueError.
    Check(s);
  }

  ~ShelfConnector() {
    py::gil_scoped_release nogil;
    connector_->Close();
  }
  ShelfConnector(const ShelfConnector&) = delete;
  ShelfConnector& operator=(const ShelfConnector&) = delete;

  int EventFd() const { return connector_->event_fd(); }

  uint64_t SubmitGet(py::handle keys, py::handle views) {
    return SubmitBuffers(NativeConnector::Op::kGet, keys, views, /*writable=*/true);
  }
  uint64_t SubmitSet(py::handle keys, py::handle views) {
    return SubmitBuffers(NativeConnector::Op::kSet, keys, views, /*writable=*/false);
  }
  uint64_t SubmitExists(py::handle keys) { return SubmitKeys(NativeConnector::Op::kExists, keys); }
  uint64_t SubmitDelete(py::handle keys) { return SubmitKeys(NativeConnector::Op::kDelete, keys); }

  py::list DrainCompletions() {
    std::vector<NativeConnector::Completion> done;
    {
      py::gil_scoped_release nogil;
      done = connector_->Drain();
    }
    py::list out;
    for (NativeConnector::Completion& c : done) {
      held_.erase(c.future_id);  // its buffers are free again
      py::object results = py::none();
      if (!c.results.empty()) {
        py::list bools;
        for (uint8_t r : c.results) bools.append(py::bool_(r != 0));
        results = std::move(bools);
      }
      out.append(py::make_tuple(c.future_id, c.ok, c.error, results));
    }
    return out;
  }

  void Close() {
    py::gil_scoped_release nogil;
    connector_->Close();
  }

 private:
  uint64_t SubmitBuffers(NativeConnector::Op op, py::handle keys, py::handle views, bool writable) {
    std::vector<std::string> k = ToKeys(keys);
    std::vector<BufferView> held;
    for (py::handle v : py::iter(views)) held.emplace_back(v, writable);
    if (held.size() != k.size()) {
      throw py::value_error(std::to_string(k.size()) + " keys and " + std::to_string(held.size()) +
                            " memoryviews: one buffer per key");
    }
    std::vector<void*> buffers;
    std::vector<size_t> lengths;
    buffers.reserve(held.size());
    lengths.reserve(held.size());
    for (const BufferView& b : held) {
      buffers.push_back(b.data());
      lengths.push_back(b.size());
    }
    // Held until drain_completions hands the batch back, so the memory
    // stays exported (a bytearray cannot be resized under the workers);
    // filed before the batch can complete.
    const uint64_t id = connector_->NewFutureId();
    held_[id] = std::move(held);
    py::gil_scoped_release nogil;
    connector_->Submit(id, op, std::move(k), std::move(buffers), std::move(lengths));
    return id;
  }

  uint64_t SubmitKeys(NativeConnector::Op op, py::handle keys) {
    std::vector<std::string> k = ToKeys(keys);
    const uint64_t id = connector_->NewFutureId();
    py::gil_scoped_release nogil;
    connector_->Submit(id, op, std::move(k), {}, {});
    return id;
  }

  std::unique_ptr<NativeConnector> connector_;
  // Touched only with the GIL held.
  std::map<uint64_t, std::vector<BufferView>> held_;
};

}  // namespace

void BindLmcache(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "lmcache",
      "LMCache's native connector interface over a Shelf cluster: ShelfConnector, for an L2 "
      "adapter of type native_plugin. See docs/integrations.md.");
  std::string name = parent.attr("__name__").cast<std::string>() + ".lmcache";
  py::module_::import("sys").attr("modules")[py::str(name)] = m;

  py::class_<ShelfConnector>(
      m, "ShelfConnector",
      "LMCache's native connector (event_fd, submit_batch_get/set/exists/delete, "
      "drain_completions, close) over libshelf. Submissions never block; `workers` threads run "
      "the batches, one master round trip per slice of keys, and each finished batch is "
      "signalled on event_fd(). A batch's buffers must stay valid until drain_completions() "
      "has returned its future id.")
      .def(py::init<const std::string&, const std::string&, const std::string&, const std::string&,
                    const std::string&, uint32_t, uint32_t, uint64_t, uint32_t, bool>(),
           py::kw_only(), py::arg("master"), py::arg("secret_file") = "",
           py::arg("credentials") = "", py::arg("principal") = "", py::arg("tenant") = "default",
           py::arg("workers") = 4, py::arg("queue_max") = 1024, py::arg("timeout_ms") = 5000,
           py::arg("transfer_threads") = 8, py::arg("allow_shm") = true,
           "master: HOST:PORT[,HOST:PORT...] or etcd://HOST:PORT/CLUSTER. secret_file: the "
           "cluster secret's file. credentials and principal: a credentials file and which of "
           "its principals (docs/security.md). tenant: must be that principal's tenant "
           "(\"default\": whichever it is). workers: batches run at once (1..64). queue_max: "
           "batches that may wait (1..65536); one more completes at once with ok=False. "
           "timeout_ms: each batch call's deadline. transfer_threads and allow_shm: the "
           "client's (shared memory with stores on this host; else tcp).")
      .def("event_fd", &ShelfConnector::EventFd,
           "An eventfd, readable while completions wait for drain_completions().")
      .def("submit_batch_get", &ShelfConnector::SubmitGet, py::arg("keys"), py::arg("memoryviews"),
           "Reads each key into its writable buffer (its exact size); returns the future id. "
           "The completion's list says which keys were read.")
      .def("submit_batch_set", &ShelfConnector::SubmitSet, py::arg("keys"), py::arg("memoryviews"),
           "Stores each buffer under its key (a key already present keeps its bytes); returns "
           "the future id. The completion's ok covers every key.")
      .def("submit_batch_exists", &ShelfConnector::SubmitExists, py::arg("keys"),
           "Which keys are present (no lease is taken); returns the future id.")
      .def("submit_batch_delete", &ShelfConnector::SubmitDelete, py::arg("keys"),
           "Removes the keys; the completion's list says which were removed (an absent key is "
           "not an error). Returns the future id.")
      .def("drain_completions", &ShelfConnector::DrainCompletions,
           "The finished batches: a list of (future_id, ok, error, list[bool] or None).")
      .def("close", &ShelfConnector::Close,
           "Refuses new batches, lets the queued ones finish and closes the client.");
}

}  // namespace shelf::python
