#include "client/topology.hpp"

#include "client/pipeline.hpp"

#include "client/cluster_topology.hpp"
#include "client/sentinel_topology.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {

Node::Node(ConnectionOptions options, PoolOptions limits, PubSubSettings pubsub)
    : pool_(std::move(options), limits),
      // Only a single server pipelines (lock_calls.cpp): routed calls on
      // Sentinel and Cluster need the pool's failover and MOVED/ASK handling.
      pipeline_(pool_.options().auto_pipeline && pool_.options().deployment == Deployment::standalone
                    ? std::make_unique<Pipeline>(pool_.options())
                    : nullptr),
      endpoint_(pool_.options().endpoint()),
      pubsub_(std::move(pubsub)) {}

Node::~Node() = default;

NodeService& Node::service(NodeServiceFactory make) {
  std::lock_guard lock(service_mutex_);
  if (!service_) service_ = make(pool_.options(), pubsub_);
  return *service_;
}

std::string Node::subscriber_id_if_started() {
  std::lock_guard lock(service_mutex_);
  return service_ ? service_->id() : std::string();
}

std::unique_ptr<Topology> make_topology(const ConnectionOptions& options, PoolOptions limits) {
  switch (options.deployment) {
    case Deployment::standalone:
      return std::make_unique<StandaloneTopology>(options, limits);
    case Deployment::sentinel:
      return std::make_unique<SentinelTopology>(options, limits);
    case Deployment::cluster:
      return std::make_unique<ClusterTopology>(options, limits);
  }
  throw ConfigError("connection options: " + options.endpoint() + ": unknown deployment");
}

}  // namespace lockon::detail
