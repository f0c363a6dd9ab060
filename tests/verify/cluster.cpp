// verify/cluster.cpp — the standalone topology's servers and proxies.
#include "cluster.hpp"

namespace lockon::verify {

Cluster::Cluster(ClusterConfig config)
    : config_(config), workers_(std::move(config), [this](int) { return worker_args(); }) {
  resource_ = std::make_unique<test::RedisServer>();
  lock_ = std::make_unique<test::RedisServer>(
      test::ServerOptions{.extra_args = {"--appendonly", "yes", "--appendfsync", "always"}});
  nodes_ = test::start_servers(3);
  proxy_thread_ = test::FaultProxy::make_thread();
  lock_proxy_ = std::make_unique<test::FaultProxy>(lock_->host(), lock_->port(), proxy_thread_);
  for (const auto& node : nodes_)
    node_proxies_.push_back(std::make_unique<test::FaultProxy>(node->host(), node->port(), proxy_thread_));
}

std::vector<std::string> Cluster::worker_args() const {
  std::string nodes;
  for (const auto& proxy : node_proxies_) nodes += (nodes.empty() ? "" : ",") + proxy->url();
  return {"--lock-url", lock_proxy_->url(), "--nodes", nodes, "--resource-url", resource_->url()};
}

void Cluster::restart_lock_server(bool keep_data) {
  lock_->kill();
  if (!keep_data) {
    std::error_code ignored;
    std::filesystem::remove_all(lock_->dir() / "appendonlydir", ignored);
  }
  lock_->restart();
}

}  // namespace lockon::verify
