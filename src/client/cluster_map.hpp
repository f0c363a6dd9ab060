// Parsing of Redis Cluster's slot map replies (CLUSTER SHARDS, and CLUSTER
// SLOTS before Redis 7) into slot ranges and their masters: pure functions
// shared by the blocking front (ClusterTopology) and the async front
// (AsyncCluster), so both read the map the same way.
#pragma once

#include <chrono>
#include <set>
#include <string>
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

/// How long one map read (connect, CLUSTER SHARDS, maybe CLUSTER SLOTS) of
/// one node may take: the connect timeout plus the socket timeout (5 s when
/// that is 0, "none": a frozen node must not hold a read for ever). A map
/// read serves every caller, so no caller's deadline bounds it; each caller
/// waits for it only until its own (ClusterTopology, AsyncCluster).
inline std::chrono::milliseconds map_read_budget(const ConnectionOptions& options) {
  const auto socket = options.socket_timeout.count() > 0 ? options.socket_timeout : std::chrono::milliseconds(5000);
  return options.connect_timeout + socket;
}

/// "host:port".
inline std::string address_text(const NodeAddress& address) {
  return address.host + ":" + std::to_string(address.port);
}

/// The nodes a map read asks, in order: the masters of the current map
/// (`known`), then the URL's seeds not among them; those in `suspects`
/// ("host:port": a request or a map read of theirs failed or went
/// unanswered since they last answered a map read) go last, so a frozen
/// master does not hold every read for its whole budget before a live node
/// is asked.
std::vector<NodeAddress> map_candidates(const std::vector<NodeAddress>& known, const std::vector<NodeAddress>& seeds,
                                        const std::set<std::string>& suspects);

/// CLUSTER SLOTS' reply: [[start, end, [host, port, id...], replicas...]...].
std::vector<SlotOwner> parse_cluster_slots(const redisReply& reply, const NodeAddress& asked);

}  // namespace lockon::detail
