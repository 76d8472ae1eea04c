#include "server/master/ha/master_ha.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace shelf::master {

MasterHa::MasterHa(Electable* master, MasterHaOptions options)
    : master_(master),
      options_(std::move(options)),
      nodes_prefix_(absl::StrCat("/shelf/", options_.cluster, "/nodes/")) {}

MasterHa::~MasterHa() {
  Stop();
  // The election uses the client: it goes first.
  election_.reset();
  client_.reset();
}

absl::Status MasterHa::Start() {
  auto client = coord::EtcdClient::Connect(options_.etcd, options_.etcd_options);
  if (!client.ok()) {
    return absl::Status(client.status().code(),
                        absl::StrCat("--etcd: ", client.status().message()));
  }
  client_ = *std::move(client);
  master_->StartAsStandby();
  coord::EtcdClient* ec = client_.get();
  master_->set_on_node_registered([ec, prefix = nodes_prefix_](const std::string& id) {
    absl::StatusOr<int64_t> put = ec->Put(prefix + id, "");
    if (!put.ok()) {
      SHELF_LOG(WARNING) << "cannot record node in etcd" << Kv("node", id)
                         << Kv("error", put.status().message());
    }
  });
  coord::ElectionOptions eo;
  eo.cluster = options_.cluster;
  eo.address = options_.advertise;
  eo.lease_ttl_s =
      static_cast<int64_t>(std::max<uint64_t>(1, (options_.election_ttl_ms + 999) / 1000));
  eo.on_elected = [this](int64_t term) { OnElected(term); };
  eo.on_lost = [this] { master_->StepDown(""); };
  eo.on_health = [this](const absl::Status& s) { OnHealth(s); };
  election_ = std::make_unique<coord::LeaderElection>(client_.get(), eo);
  coord::LeaderElection* el = election_.get();
  master_->set_lease_check([el] { return el->is_leader(); });
  if (absl::Status s = election_->Start(); !s.ok()) return s;
  campaigning_ = true;
  auto watch = coord::LeaderElection::WatchLeader(
      client_.get(), options_.cluster, [this](const std::optional<coord::LeaderInfo>& info) {
        if (info.has_value() && info->intact && info->address != options_.advertise) {
          master_->SetLeaderHint(info->address);
        }
      });
  if (watch.ok()) leader_watch_ = *std::move(watch);
  SHELF_LOG(INFO) << "campaigning" << Kv("etcd", options_.etcd) << Kv("cluster", options_.cluster)
                  << Kv("advertise", options_.advertise);
  return absl::OkStatus();
}

void MasterHa::Stop() {
  if (!campaigning_) return;
  campaigning_ = false;
  leader_watch_.reset();
  election_->Resign().IgnoreError();  // hand over at once
}

void MasterHa::OnElected(int64_t term) {
  // The index is soft state: start empty and let every store known to the
  // cluster re-register with its inventory.
  std::vector<std::string> expected;
  auto known = client_->GetPrefix(nodes_prefix_);
  if (known.ok()) {
    for (const auto& kv : known->kvs) expected.push_back(kv.key.substr(nodes_prefix_.size()));
  }
  master_->BecomeLeader(static_cast<uint64_t>(term), std::move(expected),
                        options_.recovery_grace_ms);
}

void MasterHa::OnHealth(const absl::Status& status) {
  degraded_.store(!status.ok());
  if (!status.ok()) {
    SHELF_LOG(WARNING) << "etcd unreachable: serving on the current lease (degraded)"
                       << Kv("error", status.message());
  } else {
    SHELF_LOG(INFO) << "etcd reachable again";
  }
}

}  // namespace shelf::master
