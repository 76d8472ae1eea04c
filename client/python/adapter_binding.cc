// shelf.StorageAdapter: the shape engines' hierarchical caches use for an
// external tier.
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "client/memory_batch.h"
#include "client/python/module.h"

namespace shelf::python {
namespace {

// The shape engines' hierarchical caches use for an external tier: a miss,
// and any failure of the cluster, reads as "not there" (the engine computes
// instead); only misuse (a bad key, a closed client) raises.
class StorageAdapter {
 public:
  StorageAdapter(std::shared_ptr<PyClient> client, std::string key_prefix, uint32_t replicas,
                 int64_t timeout_ms)
      : client_(std::move(client)), prefix_(std::move(key_prefix)), timeout_ms_(timeout_ms) {
    put_options_.replicas = replicas;
  }

  py::object Get(py::handle key, const py::object& target) {
    std::string k = Key(key);
    if (!target.is_none()) {
      BufferView view(target, /*writable=*/true);
      size_t size = 0;
      Status s;
      {
        py::gil_scoped_release nogil;
        s = client_->get()->GetInto(k, view.data(), view.size(), &size,
                                    Deadline::FromTimeoutMs(timeout_ms_));
      }
      return Item(s) ? target : py::none();
    }
    std::string value;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->get()->Get(k, &value, Deadline::FromTimeoutMs(timeout_ms_));
    }
    return Item(s) ? py::object(ToBytes(value)) : py::none();
  }

  bool Set(py::handle key, py::handle value) {
    std::string k = Key(key);
    BufferView view(value, /*writable=*/false);
    Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->get()->Put(k, view.data(), view.size(), PutOpts());
    }
    return Item(s);
  }

  bool Exists(py::handle key) {
    std::vector<std::string> keys = {Key(key)};
    std::vector<bool> present;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->get()->Exists(keys, &present, Deadline::FromTimeoutMs(timeout_ms_));
    }
    return Item(s) && present[0];
  }

  bool Delete(py::handle key) {
    std::string k = Key(key);
    Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->get()->Remove(k, Deadline::FromTimeoutMs(timeout_ms_));
    }
    return Item(s);
  }

  py::list BatchGet(py::handle keys, const py::object& targets) {
    std::vector<std::string> k = Keys(keys);
    py::list out;
    if (k.empty()) return out;
    if (!targets.is_none()) {
      std::vector<py::object> t;
      for (py::handle h : py::iter(targets)) t.push_back(py::reinterpret_borrow<py::object>(h));
      if (t.size() != k.size()) throw py::value_error("batch_get: one target per key");
      std::vector<BufferView> views;
      views.reserve(t.size());
      for (const py::object& o : t) views.emplace_back(o, /*writable=*/true);
      std::vector<Status> statuses(k.size());
      {
        py::gil_scoped_release nogil;
        // Chunks of the batch limit, each one Lookup and parallel reads
        // straight into the targets.
        ForEachBatchSlice(k.size(), [&](size_t begin, size_t end) {
          std::vector<std::string> chunk(k.begin() + begin, k.begin() + end);
          std::vector<void*> ptrs;
          std::vector<size_t> caps;
          for (size_t i = begin; i < end; ++i) {
            ptrs.push_back(views[i].data());
            caps.push_back(views[i].size());
          }
          std::vector<Status> st;
          Status s = BatchGetIntoMemory(client_->get(), chunk, ptrs, caps,
                                        Deadline::FromTimeoutMs(timeout_ms_), &st, nullptr);
          for (size_t i = begin; i < end; ++i) statuses[i] = s.ok() ? st[i - begin] : s;
        });
      }
      for (size_t i = 0; i < k.size(); ++i) out.append(Item(statuses[i]) ? t[i] : py::none());
      return out;
    }
    std::vector<std::string> values(k.size());
    std::vector<Status> statuses(k.size());
    {
      py::gil_scoped_release nogil;
      ForEachBatchSlice(k.size(), [&](size_t begin, size_t end) {
        std::vector<std::string> chunk(k.begin() + begin, k.begin() + end);
        std::vector<std::string> v;
        std::vector<Status> st;
        Status s = client_->get()->BatchGet(chunk, &v, &st, Deadline::FromTimeoutMs(timeout_ms_));
        for (size_t i = begin; i < end; ++i) {
          statuses[i] = s.ok() ? st[i - begin] : s;
          if (s.ok()) values[i] = std::move(v[i - begin]);
        }
      });
    }
    for (size_t i = 0; i < k.size(); ++i) {
      out.append(Item(statuses[i]) ? py::object(ToBytes(values[i])) : py::none());
    }
    return out;
  }

  bool BatchSet(py::handle keys, py::handle values) {
    std::vector<std::string> k = Keys(keys);
    std::vector<BufferView> views;
    for (py::handle v : py::iter(values)) views.emplace_back(v, /*writable=*/false);
    if (views.size() != k.size()) throw py::value_error("batch_set: one value per key");
    if (k.empty()) return true;
    bool all = true;
    std::vector<Status> results;
    {
      py::gil_scoped_release nogil;
      ForEachBatchSlice(k.size(), [&](size_t begin, size_t end) {
        std::vector<PutItem> items;
        for (size_t i = begin; i < end; ++i) {
          items.push_back(PutItem{k[i], views[i].data(), views[i].size()});
        }
        std::vector<Status> st;
        Status s = client_->get()->BatchPut(items, &st, PutOpts());
        for (size_t i = 0; i < items.size(); ++i) results.push_back(s.ok() ? st[i] : s);
      });
    }
    for (const Status& s : results) all = Item(s) && all;
    return all;
  }

  // The number of leading keys present: one MatchPrefix (a count: the
  // batch_get that follows takes its own read leases).
  size_t BatchExists(py::handle keys) {
    std::vector<std::string> k = Keys(keys);
    size_t total = 0;
    ForEachBatchSlice(k.size(), [&](size_t begin, size_t end) {
      std::vector<std::string> chunk(k.begin() + begin, k.begin() + end);
      size_t matched = 0;
      Status s;
      {
        py::gil_scoped_release nogil;
        s = client_->get()->MatchPrefix(chunk, &matched, Deadline::FromTimeoutMs(timeout_ms_));
      }
      if (!Item(s)) return false;
      total += matched;
      return matched == chunk.size();  // the prefix ends in this slice
    });
    return total;
  }

  std::string last_error() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return last_error_;
  }
  const std::shared_ptr<PyClient>& client() const { return client_; }

 private:
  std::string Key(py::handle key) const { return prefix_ + ToKey(key); }
  std::vector<std::string> Keys(py::handle keys) const {
    std::vector<std::string> k = ToKeys(keys);
    for (std::string& s : k) s.insert(0, prefix_);
    return k;
  }
  PutOptions PutOpts() const {
    PutOptions po = put_options_;
    po.deadline = Deadline::FromTimeoutMs(timeout_ms_);
    return po;
  }
  // True for OK. Misuse raises; anything else is "not there" and noted.
  bool Item(const Status& s) ABSL_LOCKS_EXCLUDED(mu_) {
    if (s.ok()) return true;
    if (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kFailedPrecondition) {
      Raise(s);
    }
    if (s.code() != StatusCode::kNotFound) {
      MutexLock lock(&mu_);
      last_error_ = s.ToString();
    }
    return false;
  }

  std::shared_ptr<PyClient> client_;
  const std::string prefix_;
  const int64_t timeout_ms_;
  PutOptions put_options_;
  Mutex mu_;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
};

std::string ToKeyPrefix(py::handle prefix) {
  if (prefix.is_none()) return std::string();
  return ToKey(prefix);
}

}  // namespace

void BindStorageAdapter(py::module_& m) {
  py::class_<StorageAdapter>(
      m, "StorageAdapter",
      "A storage backend with the shape engines' hierarchical caches use: get/set/exists and "
      "batch forms, keys as str or bytes, values as any bytes-like object. A miss, or a "
      "cluster that cannot answer, reads as not there (None / False / 0) and is noted in "
      "last_error; misuse (a bad key, a closed client) raises.")
      .def(py::init([](std::shared_ptr<PyClient> client, const py::object& masters,
                       py::handle key_prefix, uint32_t replicas, int64_t timeout_ms) {
             if (!client) {
               if (masters.is_none())
                 throw py::value_error("StorageAdapter needs client or masters");
               ClientOptions o;
               if (py::isinstance<py::str>(masters)) {
                 o.masters = {masters.cast<std::string>()};
               } else {
                 o.masters = masters.cast<std::vector<std::string>>();
               }
               client = std::make_shared<PyClient>(o);
             }
             return std::make_unique<StorageAdapter>(std::move(client), ToKeyPrefix(key_prefix),
                                                     replicas, timeout_ms);
           }),
           py::arg("client") = nullptr, py::kw_only(), py::arg("masters") = py::none(),
           py::arg("key_prefix") = py::none(), py::arg("replicas") = 1, py::arg("timeout_ms") = 0)
      .def("get", &StorageAdapter::Get, py::arg("key"), py::arg("target") = py::none(),
           "The value as bytes (or read into `target` and returned), None when absent.")
      .def("set", &StorageAdapter::Set, py::arg("key"), py::arg("value"),
           "True when stored (or already there).")
      .def("exists", &StorageAdapter::Exists, py::arg("key"))
      .def("delete", &StorageAdapter::Delete, py::arg("key"), "True when removed.")
      .def("batch_get", &StorageAdapter::BatchGet, py::arg("keys"), py::arg("targets") = py::none(),
           "One value (or target) or None per key.")
      .def("batch_set", &StorageAdapter::BatchSet, py::arg("keys"), py::arg("values"),
           "True when every value was stored.")
      .def("batch_exists", &StorageAdapter::BatchExists, py::arg("keys"),
           "The number of leading keys present.")
      .def_property_readonly("client", &StorageAdapter::client)
      .def_property_readonly("last_error", &StorageAdapter::last_error,
                             "The most recent failure other than a miss, for logs ('' if none).");
}

}  // namespace shelf::python
