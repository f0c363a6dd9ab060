// verify/cluster_nemesis.cpp — how each Cluster-topology fault is injected.
#include "cluster_nemesis.hpp"

#include <algorithm>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace lockon::verify {

namespace {

// How long the nemesis waits for a settled cluster before a fault of a
// server: time for a failover's old master to resync as a replica; beyond
// it gossip is stuck, which the settle_timeout record then shows.
constexpr auto kSettleBound = std::chrono::seconds(10);
// CLUSTER FAILOVER's bound (the fixture asks again every 6 s).
constexpr auto kFailoverBound = std::chrono::seconds(15);

std::string port_of(const test::RedisServer& server) { return std::to_string(server.port()); }

// An exception's text as one record field (no spaces), shortened.
std::string as_field(const std::string& text) {
  std::string field = text.substr(0, 80);
  for (char& c : field)
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') c = '_';
  return field;
}

}  // namespace

bool ClusterNemesis::wait_settled() {
  const auto start = std::chrono::steady_clock::now();
  const auto left = std::chrono::duration_cast<Millis>(end_ - start);
  if (left <= Millis(0)) return false;
  const std::int64_t start_ns = now_ns();
  try {
    topology_.cluster().wait_settled(std::min<Millis>(left, kSettleBound));
    return true;
  } catch (const std::exception& e) {
    std::cerr << "cluster nemesis: " << e.what() << '\n';
  }
  const auto waited = std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - start);
  record("settle_timeout", "cluster", start_ns, "waited_ms=" + std::to_string(waited.count()));
  return std::chrono::steady_clock::now() < end_;
}

void ClusterNemesis::inject_server_fault(std::string_view kind) {
  if (!wait_settled()) return;
  if (kind == "slot_migration") {
    slot_migration();
  } else if (kind == "cluster_failover") {
    cluster_failover();
  } else if (kind == "master_stall_short") {
    master_stall_short();
  }
}

void ClusterNemesis::slot_migration() {
  const std::vector<std::string>& keys = topology_.lock_keys();
  const std::string& key = keys[static_cast<std::size_t>(pick(static_cast<int>(keys.size())))];
  const int other = pick(2);  // which of the two other masters receives it
  const Millis migrating = span(200, 1500), migrated = span(50, 500);
  const std::int64_t start = now_ns();
  test::RedisCluster& cluster = topology_.cluster();
  int slot = -1;
  std::string detail;
  std::optional<test::RedisCluster::Migration> migration;
  try {
    slot = topology_.key_slot(key);
    test::RedisServer& from = cluster.owner_of_slot(slot);
    std::vector<test::RedisServer*> targets;
    for (test::RedisServer* master : cluster.masters())  // by port: a seed picks the same one
      if (master != &from) targets.push_back(master);
    if (targets.empty()) throw std::runtime_error("no other master");
    test::RedisServer& to = *targets[static_cast<std::size_t>(other) % targets.size()];
    detail = "key=" + key + ":from=" + port_of(from) + ":to=" + port_of(to);
    // MIGRATING on the owner, IMPORTING on the target: the owner serves
    // the keys it still has and answers ASK for the others; a script over
    // K and companions split between both gets TRYAGAIN.
    migration = cluster.begin_migration(slot, to);
    sleep_for(migrating);
    cluster.migrate_keys(*migration);  // the owner now answers ASK for every key of the slot
    sleep_for(migrated);
    cluster.finish_migration(*migration);
    record("slot_migration", "slot:" + std::to_string(slot), start,
           detail + ":migrating_ms=" + std::to_string(migrating.count()) +
               ":migrated_ms=" + std::to_string(migrated.count()));
    return;
  } catch (const std::exception& e) {
    std::cerr << "cluster nemesis: slot_migration of slot " << slot << " (" << detail << "): " << e.what() << '\n';
    detail += ":error=" + as_field(e.what());
  }
  // Half-way: finish the move, or the slot stays split for the rest of the
  // run (every later fault would then meet an unsettled cluster).
  if (!migration && slot >= 0) {
    // begin_migration failed between its two SETSLOTs: clear both states.
    try {
      for (test::RedisServer* master : cluster.masters())
        master->command({"CLUSTER", "SETSLOT", std::to_string(slot), "STABLE"});
      detail += ":made_stable";
    } catch (const std::exception& e) {
      std::cerr << "cluster nemesis: SETSLOT STABLE of slot " << slot << ": " << e.what() << '\n';
    }
  }
  if (migration) {
    try {
      cluster.migrate_keys(*migration);
      cluster.finish_migration(*migration);
      detail += ":completed";
    } catch (const std::exception& e) {
      std::cerr << "cluster nemesis: completing the migration of slot " << slot << ": " << e.what() << '\n';
      detail += ":not_completed";
    }
  }
  record("slot_migration", "slot:" + std::to_string(slot), start, detail);
}

void ClusterNemesis::cluster_failover() {
  const int which = pick(3);
  const std::int64_t start = now_ns();
  std::string target = "master:?", detail;
  try {
    const std::vector<test::RedisServer*> masters = topology_.cluster().masters();
    if (masters.empty()) throw std::runtime_error("no master");
    test::RedisServer& master = *masters[static_cast<std::size_t>(which) % masters.size()];
    target = "master:" + port_of(master);
    test::RedisServer& replica = topology_.cluster().replica_of(master);
    // Coordinated: the master stops its clients until the replica has
    // processed its whole stream, then the replica takes over (no write lost).
    topology_.cluster().failover(replica, kFailoverBound);
    detail = "promoted=" + port_of(replica);
  } catch (const std::exception& e) {
    std::cerr << "cluster nemesis: cluster_failover of " << target << ": " << e.what() << '\n';
    detail = "error=" + as_field(e.what());
  }
  record("cluster_failover", target, start, detail);
}

void ClusterNemesis::master_stall_short() {
  const int which = pick(3);
  // cluster-node-timeout is 2 s (cluster_fixture.cpp): a stall of at most
  // 0.8 s marks nobody PFAIL, so no failover may follow.
  const Millis length = span(300, 800);
  const std::int64_t start = now_ns();
  std::vector<test::RedisServer*> masters;
  try {
    masters = topology_.cluster().masters();
  } catch (const std::exception& e) {
    std::cerr << "cluster nemesis: master_stall_short: " << e.what() << '\n';
  }
  if (masters.empty()) {
    record("master_stall_short", "master:?", start, "error=no_master");
    return;
  }
  test::RedisServer& master = *masters[static_cast<std::size_t>(which) % masters.size()];
  master.pause();
  sleep_for(length);
  master.resume();
  record("master_stall_short", "master:" + port_of(master), start, "ms=" + std::to_string(length.count()));
}

}  // namespace lockon::verify
