// Parsing of Redis Cluster's slot map replies (CLUSTER SHARDS, and CLUSTER
// SLOTS before Redis 7) into slot ranges and their masters: pure functions
// shared by the blocking front (ClusterTopology) and the async front
// (AsyncCluster), so both read the map the same way.
#pragma once

#include <vector>

#include "client/hiredis_handles.hpp"
#include "lockon/options.hpp"

namespace lockon::detail {

/// Slots start..end (inclusive) are served by `master`.
struct SlotOwner {
  int start = 0;
  int end = 0;
  NodeAddress master;
};

/// CLUSTER SHARDS' reply, asked of `asked` (announced hosts "" or "?" mean
/// that node's address). Only online masters count; `tls`: their tls-port.
/// Empty when the reply is not an array (an old server: ask CLUSTER SLOTS).
std::vector<SlotOwner> parse_cluster_shards(const redisReply& reply, const NodeAddress& asked, bool tls);

/// The options of one cluster node's own connection: the seed URL's
/// credentials, TLS and timeouts, that node's address, no further routing.
inline ConnectionOptions node_options(const ConnectionOptions& cluster, const NodeAddress& address) {
  ConnectionOptions options = cluster;
  options.deployment = Deployment::standalone;
  options.seeds.clear();
  options.unix_path.clear();
  options.host = address.host;
  options.port = address.port;
  return options;
}

/// CLUSTER SLOTS' reply: [[start, end, [host, port, id...], replicas...]...].
std::vector<SlotOwner> parse_cluster_slots(const redisReply& reply, const NodeAddress& asked);

}  // namespace lockon::detail
