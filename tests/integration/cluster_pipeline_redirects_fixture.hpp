// integration/cluster_pipeline_redirects_fixture.hpp — keys {tag}:a, :b, :c
// in one slot of a cluster master, which a test half-moves (or moves) to
// another master while Client::pipeline runs over them
// (test_cluster_pipeline_redirects.cpp, test_cluster_pipeline_partial.cpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "client/slots.hpp"
#include "lockon/client.hpp"
#include "support/raw_connection.hpp"

#include "cluster_test_fixture.hpp"

namespace lockon::test {

// Keys {tag}:a, {tag}:b, {tag}:c in one slot of the first master, counters
// 10, 20, 30 there; tests half-move (or move) the slot to the second.
class ClusterPipelineRedirects : public ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    tag_ = tag();
    slot_ = detail::key_slot(tag_);
    source_ = &cluster().owner_of_slot(slot_);
    for (RedisServer* master : cluster().masters())
      if (master != source_) target_ = master;
    id_ = unique_key("pipeline-ask");
    a_ = key("a");
    b_ = key("b");
    c_ = key("c");
    for (const auto& [name, value] : {std::pair{a_, "10"}, std::pair{b_, "20"}, std::pair{c_, "30"}})
      ASSERT_TRUE(source_->command({"SET", name, value}).is("OK"));
  }
  // Keys the old code wrote on the target next to the source's copy go
  // first (MIGRATE would fail with BUSYKEY), then the slot goes back.
  void TearDown() override {
    if (migrating_) {
      const RawReply left = source_->command({"CLUSTER", "GETKEYSINSLOT", std::to_string(slot_), "1000"});
      for (const RawReply& name : left.elements) target_ask({"DEL", name.str});
      cluster().migrate_keys(migration_);
      cluster().finish_migration(migration_);
      moved_ = true;
    }
    if (moved_) {
      const auto back = cluster().begin_migration(slot_, *source_);
      cluster().migrate_keys(back);
      cluster().finish_migration(back);
    }
  }

  // The keys' hash tag (its slot is the one moved).
  virtual std::string tag() const { return name_on(*cluster().masters()[0], "pipeline-ask"); }
  std::string key(const std::string& name) const { return "{" + tag_ + "}:" + name + ":" + id_; }
  void begin_migration() {
    migration_ = cluster().begin_migration(slot_, *target_);
    migrating_ = true;
  }
  void finish_migration() {
    cluster().migrate_keys(migration_);
    cluster().finish_migration(migration_);
    migrating_ = false;
    moved_ = true;
  }
  // One key from the source to the target (the slot is migrating).
  void move_to_target(const std::string& name) const {
    const RawReply moved =
        source_->command({"MIGRATE", target_->host(), std::to_string(target_->port()), name, "0", "5000"});
    ASSERT_TRUE(moved.is("OK")) << moved.to_string();
  }
  // A command on the target as a client following ASK sends it.
  RawReply target_ask(const std::vector<std::string>& args) const {
    RawConnection target = target_->connect();
    target.command({"ASKING"});
    return target.command(args);
  }
  // GET on the source, read directly (the slot is still served there).
  RawReply source_get(const std::string& name) const { return source_->command({"GET", name}); }

  RedisServer* source_ = nullptr;
  RedisServer* target_ = nullptr;
  std::string tag_;
  std::string id_;  // unique per test
  int slot_ = 0;
  std::string a_, b_, c_;
  RedisCluster::Migration migration_{};
  bool migrating_ = false;
  bool moved_ = false;
};

inline std::vector<long long> integers(const std::vector<Reply>& replies) {
  std::vector<long long> values;
  for (const Reply& reply : replies) values.push_back(reply.type() == Reply::Type::integer ? reply.as_integer() : -999);
  return values;
}

// Client::pipeline routes WAIT by its first argument like a key: in a
// cluster pipeline it must hash to the pipeline's slot, so these keys are
// tagged {1} (WAIT 1 ...).
class ClusterPipelineWaitRedirects : public ClusterPipelineRedirects {
 protected:
  std::string tag() const override { return "1"; }
};

}  // namespace lockon::test
