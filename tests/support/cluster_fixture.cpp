// support/cluster_fixture.cpp — see cluster_fixture.hpp.
#include "support/cluster_fixture.hpp"

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "support/process.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// CLUSTER SHARDS as {slot range start, end, master port}.
struct Range {
  long long start = 0;
  long long end = 0;
  int port = 0;
};

const RawReply* field(const RawReply& map, const std::string& name) {
  for (std::size_t i = 0; i + 1 < map.elements.size(); i += 2)
    if (map.elements[i].str == name) return &map.elements[i + 1];
  return nullptr;
}

std::vector<Range> shard_ranges(const RedisServer& server) {
  const RawReply reply = server.command({"CLUSTER", "SHARDS"});
  if (reply.is_error()) throw std::runtime_error("CLUSTER SHARDS on " + std::to_string(server.port()) + ": " + reply.str);
  std::vector<Range> ranges;
  for (const RawReply& shard : reply.elements) {
    const RawReply* slots = field(shard, "slots");
    const RawReply* nodes = field(shard, "nodes");
    if (slots == nullptr || nodes == nullptr) continue;
    int master = 0;
    for (const RawReply& node : nodes->elements) {
      const RawReply* role = field(node, "role");
      const RawReply* port = field(node, "port");
      const RawReply* health = field(node, "health");
      if (role != nullptr && role->str == "master" && port != nullptr && (health == nullptr || health->str == "online"))
        master = static_cast<int>(port->integer);
    }
    for (std::size_t i = 0; i + 1 < slots->elements.size(); i += 2)
      ranges.push_back({slots->elements[i].integer, slots->elements[i + 1].integer, master});
  }
  return ranges;
}

std::string info_field(const RedisServer& server, const std::string& section, const std::string& name) {
  const RawReply reply = server.command({"CLUSTER", section});
  std::istringstream lines(reply.str);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + ":", 0) == 0) {
      std::string value = line.substr(name.size() + 1);
      while (!value.empty() && (value.back() == '\r' || value.back() == '\n')) value.pop_back();
      return value;
    }
  }
  return {};
}

void expect_ok(const RawReply& reply, const std::string& what) {
  if (reply.is_error()) throw std::runtime_error(what + ": " + reply.str);
}

}  // namespace

RedisCluster::RedisCluster(int masters, int replicas) : masters_(masters), replicas_(replicas) {
  const auto start = Clock::now();
  auto phase = start;
  const auto lap = [&](const char* name) {
    const auto now = Clock::now();
    if (!formation_report_.empty()) formation_report_ += ", ";
    formation_report_ +=
        std::string(name) + " " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - phase).count()) + " ms";
    phase = now;
  };
  // The cluster bus gets its own free port (the default, port + 10000, may
  // fall in the ephemeral range and be taken by some client socket).
  for (int i = 0; i < masters * (1 + replicas); ++i) {
    bus_ports_.push_back(reserve_free_port());
    const ServerOptions options{.extra_args = {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                               "--cluster-node-timeout", "2000", "--appendonly", "no",
                                               "--repl-diskless-sync-delay", "0",
                                               "--cluster-port", std::to_string(bus_ports_.back())}};
    nodes_.push_back(std::make_unique<RedisServer>(options));
  }
  lap("start");
  std::vector<std::string> argv{"redis-cli", "--cluster", "create"};
  for (const auto& node : nodes_) argv.push_back("127.0.0.1:" + std::to_string(node->port()));
  argv.insert(argv.end(), {"--cluster-replicas", std::to_string(replicas), "--cluster-yes"});
  const ProcessResult created = run_process(argv, 60s);
  if (!created.succeeded())
    throw std::runtime_error("redis-cli --cluster create failed: " + created.describe() + "\n" + nodes_[0]->log_tail());
  lap("create");
  wait_consistent(30s);
  lap("consistent");
  // Replicas attach asynchronously (a failover test needs them in sync) and
  // gossip goes on converging after the slots are agreed on.
  wait_settled(30s);
  lap("settled");
}

RedisCluster::~RedisCluster() {
  nodes_.clear();
  for (const int port : bus_ports_) release_free_port(port);
}

std::string RedisCluster::url() const {
  std::string url = "redis-cluster://";
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (i > 0) url += ",";
    url += "127.0.0.1:" + std::to_string(nodes_[i]->port());
  }
  return url;
}

RedisServer& RedisCluster::node(int port) const {
  for (const auto& node : nodes_)
    if (node->port() == port) return *node;
  throw std::runtime_error("no cluster node on port " + std::to_string(port));
}

RedisServer& RedisCluster::owner_of_slot(int slot) const {
  for (const auto& server : nodes_) {
    if (!server->running()) continue;
    for (const Range& range : shard_ranges(*server))
      if (range.start <= slot && slot <= range.end && range.port != 0) return node(range.port);
  }
  throw std::runtime_error("no owner for slot " + std::to_string(slot));
}

std::vector<RedisServer*> RedisCluster::masters() const {
  std::map<int, RedisServer*> by_port;
  for (const auto& server : nodes_) {
    if (!server->running()) continue;
    for (const Range& range : shard_ranges(*server))
      if (range.port != 0) by_port[range.port] = &node(range.port);
    break;
  }
  std::vector<RedisServer*> result;
  for (const auto& [port, server] : by_port) result.push_back(server);
  return result;
}

std::string RedisCluster::node_id(const RedisServer& server) const {
  const RawReply reply = server.command({"CLUSTER", "MYID"});
  expect_ok(reply, "CLUSTER MYID");
  return reply.str;
}

RedisServer& RedisCluster::replica_of(const RedisServer& master) const {
  // A replica attaches (and shows in ROLE) a moment after the cluster is
  // formed: wait for it, bounded.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (true) {
    const RawReply reply = master.command({"ROLE"});
    // master: ["master", offset, [[ip, port, offset], ...]]
    if (reply.elements.size() >= 3 && !reply.elements[2].elements.empty())
      return node(std::stoi(reply.elements[2].elements[0].elements[1].str));
    if (Clock::now() >= deadline)
      throw std::runtime_error("master " + std::to_string(master.port()) + " has no replica after 10 s: " +
                               reply.to_string());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

namespace {
// " slots a-b: port P (first node) vs Q (this node)" for each range the
// two maps do not share, so a failure names the slot that did not settle.
std::string differing_ranges(const std::map<std::pair<long long, long long>, int>& first,
                             const std::map<std::pair<long long, long long>, int>& mine) {
  std::string text;
  auto port_in = [](const auto& map, const auto& range) {
    const auto it = map.find(range);
    return it == map.end() ? std::string("-") : std::to_string(it->second);
  };
  std::map<std::pair<long long, long long>, int> all = first;
  all.insert(mine.begin(), mine.end());
  for (const auto& [range, port] : all) {
    const std::string a = port_in(first, range), b = port_in(mine, range);
    if (a != b)
      text += " slots " + std::to_string(range.first) + "-" + std::to_string(range.second) + ": " + a + " vs " + b + ";";
  }
  return text;
}
}  // namespace

void RedisCluster::wait_consistent(std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  std::string why;
  while (Clock::now() < deadline) {
    why.clear();
    std::map<std::pair<long long, long long>, int> agreed;
    bool first = true;
    for (const auto& server : nodes_) {
      if (!server->running()) continue;
      try {
        if (info_field(*server, "INFO", "cluster_state") != "ok") {
          why = "node " + std::to_string(server->port()) + " not ok";
          break;
        }
        std::map<std::pair<long long, long long>, int> mine;
        long long covered = 0;
        for (const Range& range : shard_ranges(*server)) {
          mine[{range.start, range.end}] = range.port;
          if (range.port != 0) covered += range.end - range.start + 1;
        }
        if (covered != 16384) {
          why = "node " + std::to_string(server->port()) + " sees " + std::to_string(covered) + " slots served";
          break;
        }
        if (first) agreed = mine;
        else if (mine != agreed) {
          why = "node " + std::to_string(server->port()) + " disagrees on slot owners:" + differing_ranges(agreed, mine);
          break;
        }
        first = false;
      } catch (const std::exception& e) {
        why = e.what();
        break;
      }
    }
    if (why.empty()) return;
    std::this_thread::sleep_for(50ms);
  }
  throw std::runtime_error("cluster not consistent in time: " + why);
}

RedisCluster::Migration RedisCluster::begin_migration(int slot, RedisServer& to) const {
  Migration migration{&owner_of_slot(slot), &to, slot};
  const std::string s = std::to_string(slot);
  expect_ok(to.command({"CLUSTER", "SETSLOT", s, "IMPORTING", node_id(*migration.from)}), "SETSLOT IMPORTING");
  expect_ok(migration.from->command({"CLUSTER", "SETSLOT", s, "MIGRATING", node_id(to)}), "SETSLOT MIGRATING");
  return migration;
}

void RedisCluster::migrate_keys(const Migration& migration) const {
  const std::string s = std::to_string(migration.slot);
  for (int round = 0; round < 10'000; ++round) {
    const RawReply keys = migration.from->command({"CLUSTER", "GETKEYSINSLOT", s, "100"});
    expect_ok(keys, "GETKEYSINSLOT");
    if (keys.elements.empty()) return;
    std::vector<std::string> argv{"MIGRATE", "127.0.0.1", std::to_string(migration.to->port()), "", "0", "5000", "KEYS"};
    for (const RawReply& key : keys.elements) argv.push_back(key.str);
    expect_ok(migration.from->command(argv), "MIGRATE");
  }
  throw std::runtime_error("slot " + s + " never emptied");
}

void RedisCluster::finish_migration(const Migration& migration) const {
  const std::string s = std::to_string(migration.slot);
  const std::string to_id = node_id(*migration.to);
  // SETSLOT NODE on the importing node bumps its config epoch only when it
  // is not already the highest it knows of. Right after an earlier move
  // (a slot moved there and straight back) the target may not yet have
  // heard of the epoch the other node took by gossip: it then keeps its
  // old epoch, the other nodes reject its claim as older than the previous
  // owner's, and the cluster stays split on that slot for good (seen in
  // ClusterMoves run in one process: the next test's SetUp waited 20 s).
  // So wait until the target knows the cluster's current epoch.
  const auto epoch_of = [](const RedisServer& server) {
    const std::string text = info_field(server, "INFO", "cluster_current_epoch");
    return text.empty() ? -1LL : std::stoll(text);
  };
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (true) {
    long long newest = -1;
    for (const auto& server : nodes_)
      if (server->running()) newest = std::max(newest, epoch_of(*server));
    if (epoch_of(*migration.to) >= newest) break;
    if (Clock::now() >= deadline)
      throw std::runtime_error("node " + std::to_string(migration.to->port()) + " never learnt epoch " +
                               std::to_string(newest));
    std::this_thread::sleep_for(10ms);
  }
  expect_ok(migration.to->command({"CLUSTER", "SETSLOT", s, "NODE", to_id}), "SETSLOT NODE (target)");
  expect_ok(migration.from->command({"CLUSTER", "SETSLOT", s, "NODE", to_id}), "SETSLOT NODE (source)");
  for (RedisServer* master : masters())
    if (master != migration.to && master != migration.from) master->command({"CLUSTER", "SETSLOT", s, "NODE", to_id});
}

void RedisCluster::failover(RedisServer& replica, std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  // A manual failover needs the replica in sync with its master (a demoted
  // master resyncs first) and, it turns out, more: when only the replica's
  // ROLE said "connected", the failback right after a failover timed out
  // every time and went through only when asked again 6 s later; once the
  // cluster is settled the first request goes through (~0.2 s). One check
  // is enough here (no need to confirm: a stale view only costs a retry).
  wait_settled(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()), 1);
  expect_ok(replica.command({"CLUSTER", "FAILOVER"}), "CLUSTER FAILOVER");
  auto ask_again = Clock::now() + 6s;
  while (Clock::now() < deadline) {
    if (Clock::now() >= ask_again) {
      replica.command({"CLUSTER", "FAILOVER"});
      ask_again = Clock::now() + 6s;
    }
    const RawReply role = replica.command({"ROLE"});
    if (!role.elements.empty() && role.elements[0].str == "master") {
      wait_consistent(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
      return;
    }
    std::this_thread::sleep_for(20ms);
  }
  throw std::runtime_error("failover to " + std::to_string(replica.port()) + " did not complete in time");
}

}  // namespace lockon::test
