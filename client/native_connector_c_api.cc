// The C API of shelf/lmcache.h over NativeConnector (native_connector.h).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/c_api_internal.h"
#include "client/native_connector.h"
#include "shelf/lmcache.h"
#include "shelf/shelf.h"

struct shelf_lmc {
  std::unique_ptr<shelf::NativeConnector> connector;
};

struct shelf_lmc_drained {
  std::vector<shelf::NativeConnector::Completion> completions;
};

namespace {

std::string Text(const char* s) { return s == nullptr ? std::string() : std::string(s); }

}  // namespace

extern "C" {

void shelf_lmc_config_init(shelf_lmc_config_t* config) {
  if (config == nullptr) return;
  const shelf::NativeConnectorConfig d;
  *config = shelf_lmc_config_t{};
  config->tenant = "default";
  config->workers = d.workers;
  config->queue_max = d.queue_max;
  config->timeout_ms = d.timeout_ms;
  config->transfer_threads = d.transfer_threads;
  config->allow_shm = d.allow_shm ? 1 : 0;
}

int shelf_lmc_open(const shelf_lmc_config_t* config, shelf_lmc_t** out) {
  if (config == nullptr || out == nullptr) {
    return shelf::c_api::Fail(shelf::StatusCode::kInvalidArgument,
                              "shelf_lmc_open: config or out is null");
  }
  *out = nullptr;
  shelf::NativeConnectorConfig c;
  c.master = Text(config->master);
  c.secret_file = Text(config->secret_file);
  c.credentials = Text(config->credentials);
  c.principal = Text(config->principal);
  c.tenant = config->tenant == nullptr ? "default" : config->tenant;
  c.workers = config->workers;
  c.queue_max = config->queue_max;
  c.timeout_ms = config->timeout_ms;
  c.transfer_threads = config->transfer_threads;
  c.allow_shm = config->allow_shm != 0;
  auto connector = std::make_unique<shelf_lmc>();
  if (shelf::Status s = shelf::OpenNativeConnector(c, &connector->connector); !s.ok()) {
    return shelf::c_api::Report(s);
  }
  *out = connector.release();
  return SHELF_OK;
}

void shelf_lmc_close(shelf_lmc_t* connector) {
  if (connector != nullptr) connector->connector->Close();
}

void shelf_lmc_free(shelf_lmc_t* connector) { delete connector; }

int shelf_lmc_event_fd(const shelf_lmc_t* connector) {
  return connector == nullptr ? -1 : connector->connector->event_fd();
}

uint64_t shelf_lmc_submit(shelf_lmc_t* connector, int op, const void* const* keys,
                          const size_t* key_lens, size_t n, void* const* buffers,
                          const size_t* lengths) {
  using Op = shelf::NativeConnector::Op;
  const Op ops[] = {Op::kGet, Op::kSet, Op::kExists, Op::kDelete};
  const bool moves_bytes = op == SHELF_LMC_GET || op == SHELF_LMC_SET;
  if (connector == nullptr || op < SHELF_LMC_GET || op > SHELF_LMC_DELETE ||
      (n > 0 && (keys == nullptr || key_lens == nullptr)) ||
      (moves_bytes && n > 0 && (buffers == nullptr || lengths == nullptr))) {
    shelf::c_api::Fail(shelf::StatusCode::kInvalidArgument,
                       "shelf_lmc_submit: a null argument, or an op that is none of "
                       "SHELF_LMC_GET/SET/EXISTS/DELETE");
    return 0;
  }
  std::vector<std::string> k;
  for (size_t i = 0; i < n; ++i) {
    k.emplace_back(static_cast<const char*>(keys[i]), key_lens[i]);
  }
  std::vector<void*> b =
      moves_bytes ? std::vector<void*>(buffers, buffers + n) : std::vector<void*>();
  std::vector<size_t> l =
      moves_bytes ? std::vector<size_t>(lengths, lengths + n) : std::vector<size_t>();
  const uint64_t id = connector->connector->NewFutureId();
  connector->connector->Submit(id, ops[op], std::move(k), std::move(b), std::move(l));
  return id;
}

int shelf_lmc_drain(shelf_lmc_t* connector, shelf_lmc_drained_t** drained, size_t* n) {
  if (connector == nullptr || drained == nullptr || n == nullptr) {
    return shelf::c_api::Fail(shelf::StatusCode::kInvalidArgument,
                              "shelf_lmc_drain: an argument is null");
  }
  auto d = std::make_unique<shelf_lmc_drained>();
  d->completions = connector->connector->Drain();
  *n = d->completions.size();
  *drained = d.release();
  return SHELF_OK;
}

int shelf_lmc_drained_get(const shelf_lmc_drained_t* drained, size_t i,
                          shelf_lmc_completion_t* completion) {
  if (drained == nullptr || completion == nullptr || i >= drained->completions.size()) {
    return shelf::c_api::Fail(shelf::StatusCode::kInvalidArgument,
                              "shelf_lmc_drained_get: no such completion");
  }
  const shelf::NativeConnector::Completion& c = drained->completions[i];
  completion->future_id = c.future_id;
  completion->ok = c.ok ? 1 : 0;
  completion->error = c.error.c_str();
  completion->results = c.results.data();
  completion->n_results = c.results.size();
  return SHELF_OK;
}

void shelf_lmc_drained_free(shelf_lmc_drained_t* drained) { delete drained; }

}  // extern "C"
