#include "client/cluster_topology.hpp"

#include <algorithm>
#include <charconv>
#include <optional>

#include "client/cluster_map.hpp"
#include "client/connection.hpp"
#include "client/error_map.hpp"
#include "common/token.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

std::string address_text(const NodeAddress& address) { return address.host + ":" + std::to_string(address.port); }

// An announced host: "" or "?" mean "the address you reached me at".
std::string host_or(std::string_view announced, const NodeAddress& asked) {
  if (announced.empty() || announced == "?") return asked.host;
  return std::string(announced);
}

}  // namespace

ClusterTopology::ClusterTopology(const ConnectionOptions& options, PoolOptions limits)
    : options_(options), limits_(limits), pubsub_{true, new_subscriber_id()} {
  if (options_.seeds.empty()) options_.seeds.push_back({options_.host, options_.port});
}

std::shared_ptr<Node> ClusterTopology::node_for(std::string_view key) { return node_for_slot(key_slot(key)); }

std::shared_ptr<Node> ClusterTopology::node_for_slot(int slot) {
  if (stale_.load(std::memory_order_relaxed)) maybe_refresh();
  bool loaded = false;
  {
    std::shared_lock lock(map_mutex_);
    if (slots_[static_cast<std::size_t>(slot)]) return slots_[static_cast<std::size_t>(slot)];
    loaded = !nodes_.empty();
  }
  // An unserved slot in a map read moments ago (a master failed and its
  // replica is not promoted yet): say so without asking again right away.
  const auto since = Clock::now().time_since_epoch().count() - last_refresh_.load(std::memory_order_relaxed);
  if (!loaded || since >= Clock::duration(kRefreshInterval).count()) refresh();
  std::shared_lock lock(map_mutex_);
  if (slots_[static_cast<std::size_t>(slot)]) return slots_[static_cast<std::size_t>(slot)];
  throw ServerBusyError("route key on " + options_.endpoint() + ": no master serves hash slot " +
                            std::to_string(slot) + " (cluster down?)",
                        "CLUSTERDOWN");
}

std::shared_ptr<Node> ClusterTopology::any_node() {
  if (stale_.load(std::memory_order_relaxed)) maybe_refresh();
  {
    std::shared_lock lock(map_mutex_);
    if (!nodes_.empty()) return nodes_.begin()->second;
  }
  refresh();
  std::shared_lock lock(map_mutex_);
  if (!nodes_.empty()) return nodes_.begin()->second;
  throw ConnectError("cluster map on " + options_.endpoint() + ": no master known");
}

std::shared_ptr<Node> ClusterTopology::node_at(const NodeAddress& address) {
  std::unique_lock lock(map_mutex_);
  if (address.host.empty()) return node_locked({options_.seeds.front().host, address.port});
  return node_locked(address);
}

std::shared_ptr<Node> ClusterTopology::node_locked(const NodeAddress& address) {
  auto& node = nodes_[address_text(address)];
  if (!node) {
    node = std::make_shared<Node>(node_options(options_, address), limits_, pubsub_);
  }
  return node;
}

void ClusterTopology::report_error_reply(const Node& node, std::string_view text) noexcept {
  static_cast<void>(node);
  const std::string_view code = text.substr(0, text.find(' '));
  if (code == "MOVED") {
    // "MOVED <slot> <host>:<port>": fix that slot now, re-read the rest soon.
    stale_.store(true, std::memory_order_relaxed);
    const auto first = text.find(' ');
    const auto second = text.find(' ', first + 1);
    if (second == std::string_view::npos) return;
    const std::string_view slot_text = text.substr(first + 1, second - first - 1);
    const std::string_view target = text.substr(second + 1);
    const auto colon = target.rfind(':');
    int slot = -1;
    int port = 0;
    std::from_chars(slot_text.data(), slot_text.data() + slot_text.size(), slot);
    if (colon == std::string_view::npos) return;
    std::from_chars(target.data() + colon + 1, target.data() + target.size(), port);
    if (slot < 0 || slot >= kClusterSlots || port <= 0 || port > 65535) return;
    try {
      std::unique_lock lock(map_mutex_);
      slots_[static_cast<std::size_t>(slot)] = node_locked({host_or(target.substr(0, colon), {node.options().host, 0}), port});
    } catch (...) {
    }
  } else if (code == "CLUSTERDOWN" || code == "READONLY" || code == "MASTERDOWN") {
    stale_.store(true, std::memory_order_relaxed);
  }
}

void ClusterTopology::report_io_failure(const Node& node) noexcept {
  static_cast<void>(node);
  stale_.store(true, std::memory_order_relaxed);
}

void ClusterTopology::maybe_refresh() noexcept {
  const auto now = Clock::now().time_since_epoch().count();
  if (now - last_refresh_.load(std::memory_order_relaxed) < Clock::duration(kRefreshInterval).count()) return;
  std::unique_lock lock(refresh_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // someone else is at it; route with what we have
  try {
    refresh_locked();
  } catch (...) {
  }
}

void ClusterTopology::refresh() {
  const std::uint64_t before = refreshes_.load();
  std::lock_guard guard(refresh_mutex_);
  // Another thread re-read the map while we waited for it: use that.
  if (refreshes_.load() != before && !stale_.load()) return;
  refresh_locked();
}

void ClusterTopology::refresh_locked() {
  last_refresh_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  ++refreshes_;
  std::vector<NodeAddress> candidates;
  {
    std::shared_lock lock(map_mutex_);
    for (const auto& [name, node] : nodes_) candidates.push_back({node->options().host, node->options().port});
  }
  for (const NodeAddress& seed : options_.seeds)
    if (std::find(candidates.begin(), candidates.end(), seed) == candidates.end()) candidates.push_back(seed);
  std::string failures;
  NodeFailures failed;
  for (const NodeAddress& candidate : candidates) {
    try {
      const std::vector<Owner> owners = read_map(candidate);
      if (owners.empty()) {
        failures += " " + address_text(candidate) + ": no slots assigned;";
        failed.add_unclassified();
        continue;
      }
      std::unique_lock lock(map_mutex_);
      std::map<std::string, std::shared_ptr<Node>> kept;
      std::array<std::shared_ptr<Node>, kClusterSlots> slots{};
      for (const Owner& owner : owners) {
        std::shared_ptr<Node> node = node_locked(owner.master);
        kept[address_text(owner.master)] = node;
        for (int slot = owner.start; slot <= owner.end && slot < kClusterSlots; ++slot)
          if (slot >= 0) slots[static_cast<std::size_t>(slot)] = node;
      }
      // Masters no longer listed are retired; callers still holding one keep
      // it alive until their exchange ends.
      nodes_.swap(kept);
      slots_.swap(slots);
      stale_.store(false);
      return;
    } catch (const Error& e) {
      failures += std::string(" ") + e.what() + ";";
      failed.add(e);
    }
  }
  // A wrong password on every node is an AuthError here too (not "unavailable").
  failed.throw_summary("cluster map on " + options_.endpoint() + ": no node answered CLUSTER SHARDS/SLOTS:" + failures);
}

std::vector<ClusterTopology::Owner> ClusterTopology::read_map(const NodeAddress& from) const {
  Connection connection(node_options(options_, from));
  const std::array<std::string_view, 2> shards{"CLUSTER", "SHARDS"};
  ReplyPtr reply = connection.command(shards, "CLUSTER SHARDS");
  if (reply->type == REDIS_REPLY_ARRAY) return parse_cluster_shards(*reply, from, options_.tls.enabled);
  // Before Redis 7: CLUSTER SLOTS.
  const std::array<std::string_view, 2> legacy{"CLUSTER", "SLOTS"};
  reply = connection.command(legacy, "CLUSTER SLOTS");
  if (reply->type == REDIS_REPLY_ERROR) throw_reply_error(*reply, connection.endpoint(), "CLUSTER SLOTS");
  return parse_cluster_slots(*reply, from);
}

}  // namespace lockon::detail
