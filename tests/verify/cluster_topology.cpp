// verify/cluster_topology.cpp — the Cluster topology's servers and workers.
#include "cluster_topology.hpp"

#include <stdexcept>

#include "lockon/lock_on.hpp"

namespace lockon::verify {

ClusterTopology::ClusterTopology(ClusterConfig config)
    : resource_(std::make_unique<test::RedisServer>()),
      cluster_(std::make_unique<test::RedisCluster>(3, 1)),
      workers_(config, [this](int) { return worker_args(); }) {
  // The names worker.cpp builds: RedisLocker's key_for<0>("verify::cs", k)
  // with the prefix "vfy" (Lock and lock_on share them), "vfy:rw:k" and
  // "vfy:sem:k" for k < 4.
  for (int k = 0; k < config.keys; ++k) lock_keys_.push_back(lock_on_key("vfy", "verify::cs", k));
  for (int k = 0; k < 4; ++k) lock_keys_.push_back("vfy:rw:" + std::to_string(k));
  for (int k = 0; k < 4; ++k) lock_keys_.push_back("vfy:sem:" + std::to_string(k));
}

std::vector<std::string> ClusterTopology::worker_args() const {
  return {"--lock-url", cluster_->url() + kClientQuery, "--resource-url", resource_->url()};
}

int ClusterTopology::key_slot(const std::string& key) const {
  for (const auto& node : cluster_->nodes()) {
    if (!node->running() || node->paused()) continue;
    const test::RawReply reply = node->command({"CLUSTER", "KEYSLOT", key});
    if (!reply.is_error()) return static_cast<int>(reply.integer);
  }
  throw std::runtime_error("no node answered CLUSTER KEYSLOT " + key);
}

}  // namespace lockon::verify
