// verify/sentinel_cluster.cpp — the Sentinel topology's servers and workers.
#include "sentinel_cluster.hpp"

namespace lockon::verify {

SentinelCluster::SentinelCluster(ClusterConfig config, std::chrono::milliseconds failover_timeout)
    : resource_(std::make_unique<test::RedisServer>()),
      sentinels_(std::make_unique<test::SentinelSet>(
          test::SentinelSetOptions{.replicas = 2, .failover_timeout = failover_timeout})),
      workers_(std::move(config), [this](int id) { return worker_args(id); }) {}

std::vector<std::string> SentinelCluster::worker_args(int id) const {
  std::vector<std::size_t> order;
  const std::size_t n = sentinels_->sentinel_count();
  for (std::size_t k = 0; k < n; ++k) order.push_back((static_cast<std::size_t>(id) + k) % n);
  return {"--lock-url", sentinels_->url_in_order(order, kClientQuery), "--resource-url", resource_->url(),
          "--record-port", "1"};
}

std::vector<int> SentinelCluster::data_ports() const {
  std::vector<int> ports;
  for (std::size_t i = 0; i < sentinels_->data_server_count(); ++i)
    ports.push_back(sentinels_->data_server(i).port());
  return ports;
}

int SentinelCluster::master_index() {
  const int named = sentinels_->master_port_by_sentinel();
  for (std::size_t i = 0; i < sentinels_->data_server_count(); ++i)
    if (sentinels_->data_server(i).port() == named) return static_cast<int>(i);
  for (std::size_t i = 0; i < sentinels_->data_server_count(); ++i) {
    test::RedisServer& server = sentinels_->data_server(i);
    if (!server.running() || server.paused()) continue;
    try {
      const test::RawReply role = server.command({"ROLE"});
      if (!role.elements.empty() && role.elements[0].str == "master") return static_cast<int>(i);
    } catch (...) {
    }
  }
  return -1;
}

int SentinelCluster::settled_master() {
  int named = 0;
  for (std::size_t i = 0; i < sentinels_->sentinel_count(); ++i) {
    try {
      const test::RawReply r =
          sentinels_->sentinel_command_at(i, {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinels_->kMasterName});
      const int port = r.elements.size() == 2 ? std::stoi(r.elements[1].str) : 0;
      if (port == 0 || (named != 0 && port != named)) return 0;
      named = port;
      // SENTINEL MASTER: a flat field/value array; "flags" adds s_down,
      // o_down, failover_in_progress... to "master" while any is true.
      const test::RawReply master = sentinels_->sentinel_command_at(i, {"SENTINEL", "MASTER", sentinels_->kMasterName});
      for (std::size_t f = 0; f + 1 < master.elements.size(); f += 2)
        if (master.elements[f].str == "flags" && master.elements[f + 1].str != "master") return 0;
    } catch (...) {
      return 0;
    }
  }
  for (std::size_t i = 0; i < sentinels_->data_server_count(); ++i) {
    test::RedisServer& server = sentinels_->data_server(i);
    if (!server.running()) continue;
    if (server.paused()) return 0;
    try {
      const test::RawReply role = server.command({"ROLE"});
      if (role.elements.empty()) return 0;
      const bool is_named = server.port() == named;
      if (is_named && role.elements[0].str != "master") return 0;
      if (!is_named && (role.elements[0].str != "slave" || role.elements.size() < 3 ||
                        role.elements[2].integer != named))
        return 0;
    } catch (...) {
      return 0;
    }
  }
  return named;
}

}  // namespace lockon::verify
