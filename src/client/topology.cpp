#include "client/topology.hpp"

#include "client/pipeline.hpp"

#include "client/cluster_topology.hpp"
#include "client/sentinel_topology.hpp"
#include "lock/subscriber.hpp"
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

Subscriber& Node::subscriber() {
  std::lock_guard lock(subscriber_mutex_);
  if (!subscriber_) subscriber_ = std::make_unique<Subscriber>(pool_.options(), pubsub_.sharded, pubsub_.subscriber_id);
  return *subscriber_;
}

std::string Node::subscriber_id_if_started() {
  std::lock_guard lock(subscriber_mutex_);
  return subscriber_ ? subscriber_->id() : std::string();
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
