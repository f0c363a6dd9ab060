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

ClusterTopology::~ClusterTopology() {
  // A running re-read uses this object: it ends within its budget.
  std::shared_future<void> running;
  {
    std::lock_guard lock(refresh_mutex_);
    running = refresh_;
  }
  if (running.valid()) running.wait();
}

std::shared_ptr<Node> ClusterTopology::node_for(std::string_view key) { return node_for_slot(key_slot(key)); }

std::shared_ptr<Node> ClusterTopology::node_for(std::string_view key, Clock::time_point until) {
  return node_for_slot(key_slot(key), until);
}

bool ClusterTopology::refresh_due() const noexcept {
  const auto since = Clock::now().time_since_epoch().count() - last_refresh_.load(std::memory_order_relaxed);
  return since >= Clock::duration(kRefreshInterval).count();
}

std::shared_future<void> ClusterTopology::start_refresh(bool due) noexcept {
  try {
    std::lock_guard lock(refresh_mutex_);
    const bool running = refresh_.valid() && refresh_.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
    if (running || !due) return running ? refresh_ : std::shared_future<void>();
    last_refresh_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    refresh_ = std::async(std::launch::async, [this] { refresh_now(); }).share();
    return refresh_;
  } catch (...) {
    return {};  // no thread now: the map stays as it is, the next caller tries again
  }
}

std::shared_ptr<Node> ClusterTopology::node_for_slot(int slot, Clock::time_point until) {
  const auto index = static_cast<std::size_t>(slot);
  if (stale_.load(std::memory_order_relaxed)) static_cast<void>(start_refresh(refresh_due()));
  bool loaded = false;
  {
    std::shared_lock lock(map_mutex_);
    if (slots_[index]) return slots_[index];
    loaded = !nodes_.empty();
  }
  // No owner: wait for a map read. An unserved slot in a map read moments
  // ago (a master failed and its replica is not promoted yet) is said so
  // without asking again right away.
  std::shared_future<void> read = start_refresh(!loaded || refresh_due());
  if (read.valid()) {
    if (until == Clock::time_point::max()) read.wait();
    else if (read.wait_until(until) != std::future_status::ready) return nullptr;  // it goes on for the others
    std::shared_lock lock(map_mutex_);
    if (slots_[index]) return slots_[index];
    lock.unlock();
    read.get();  // no map at all: what every node failed with
  }
  std::shared_lock lock(map_mutex_);
  if (slots_[index]) return slots_[index];
  throw ServerBusyError("route key on " + options_.endpoint() + ": no master serves hash slot " +
                            std::to_string(slot) + " (cluster down?)",
                        "CLUSTERDOWN");
}

std::shared_ptr<Node> ClusterTopology::any_node() {
  if (stale_.load(std::memory_order_relaxed)) static_cast<void>(start_refresh(refresh_due()));
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

std::vector<std::shared_ptr<Node>> ClusterTopology::masters() {
  refresh();
  std::vector<std::shared_ptr<Node>> masters;
  std::shared_lock lock(map_mutex_);
  for (std::size_t slot = 0; slot < slots_.size(); ++slot) {
    const std::shared_ptr<Node>& owner = slots_[slot];
    if (!owner)
      throw ServerBusyError("list the masters of " + options_.endpoint() + ": no master serves hash slot " +
                                std::to_string(slot) + " (cluster down, or a failover under way?)",
                            "CLUSTERDOWN");
    if (std::find(masters.begin(), masters.end(), owner) == masters.end()) masters.push_back(owner);
  }
  return masters;
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
  suspect(node);
  stale_.store(true, std::memory_order_relaxed);
}

void ClusterTopology::suspect(const Node& node) noexcept {
  try {
    std::lock_guard lock(refresh_mutex_);
    suspects_.insert(node.endpoint());
  } catch (...) {
  }
}

void ClusterTopology::refresh() {
  std::shared_future<void> read = start_refresh(true);
  if (read.valid()) read.get();
}

void ClusterTopology::refresh_now() {
  ++refreshes_;
  std::vector<NodeAddress> known;
  {
    std::shared_lock lock(map_mutex_);
    for (const auto& [name, node] : nodes_) known.push_back({node->options().host, node->options().port});
  }
  std::vector<NodeAddress> candidates;
  {
    std::lock_guard lock(refresh_mutex_);
    candidates = map_candidates(known, options_.seeds, suspects_);
  }
  std::string failures;
  NodeFailures failed;
  for (const NodeAddress& candidate : candidates) {
    std::vector<Owner> owners;
    try {
      owners = read_map(candidate);
    } catch (const Error& e) {
      failures += std::string(" ") + e.what() + ";";
      failed.add(e);
      std::lock_guard lock(refresh_mutex_);
      suspects_.insert(address_text(candidate));
      continue;
    }
    {
      std::lock_guard lock(refresh_mutex_);
      suspects_.erase(address_text(candidate));
    }
    if (owners.empty()) {
      // Appended piecewise: GCC 12 warns -Wrestrict (a false positive, its
      // PR 105651) on "literal" + std::string&& at -O3.
      failures.append(" ").append(address_text(candidate)).append(": no slots assigned;");
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
    last_refresh_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    return;
  }
  last_refresh_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  // A wrong password on every node is an AuthError here too (not "unavailable").
  failed.throw_summary("cluster map on " + options_.endpoint() + ": no node answered CLUSTER SHARDS/SLOTS:" + failures);
}

std::vector<ClusterTopology::Owner> ClusterTopology::read_map(const NodeAddress& from) const {
  // The whole read within its budget, whatever the socket timeout (0: none).
  const auto deadline = Clock::now() + map_read_budget(options_);
  Connection connection(node_options(options_, from));
  if (!connection.ensure_connected_by(deadline))
    throw TimeoutError("cluster map on " + connection.endpoint() + ": no connection within the map read's budget");
  const std::array<std::string_view, 2> shards{"CLUSTER", "SHARDS"};
  connection.append(shards);
  ReplyPtr reply = connection.read_reply_until(deadline, "CLUSTER SHARDS");
  if (reply->type == REDIS_REPLY_ARRAY) return parse_cluster_shards(*reply, from, options_.tls.enabled);
  // Before Redis 7: CLUSTER SLOTS.
  const std::array<std::string_view, 2> legacy{"CLUSTER", "SLOTS"};
  connection.append(legacy);
  reply = connection.read_reply_until(deadline, "CLUSTER SLOTS");
  if (reply->type == REDIS_REPLY_ERROR) throw_reply_error(*reply, connection.endpoint(), "CLUSTER SLOTS");
  return parse_cluster_slots(*reply, from);
}

}  // namespace lockon::detail
