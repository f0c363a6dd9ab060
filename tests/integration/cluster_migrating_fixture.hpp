// integration/cluster_migrating_fixture.hpp — a name on the first master
// whose slot a test puts in MIGRATING (to the second master) while locks of
// every primitive are held and waited for (issue 33). While the slot is
// MIGRATING, a script runs on the source only if the source has every key
// it declares (else TRYAGAIN, or ASK when it has none), and there Redis
// refuses it any access to a key it deleted earlier in the same run.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "client/slots.hpp"
#include "protocol/lock_scripts.hpp"
#include "support/fixtures.hpp"

#include "cluster_test_fixture.hpp"

namespace lockon::test {

class ClusterMigrating : public ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    const auto masters = cluster().masters();
    source_ = masters[0];
    target_ = masters[1];
    name_ = name_on(*source_, "migrating");
    slot_ = detail::key_slot(name_);
  }
  // The slot ends where it started, its keys with it.
  void TearDown() override {
    if (migrating_) end_migration();
    if (!moved_) return;
    const auto back = cluster().begin_migration(slot_, *source_);
    cluster().migrate_keys(back);
    cluster().finish_migration(back);
  }
  // IMPORTING on the target, MIGRATING on the source; the keys stay.
  void begin_migration() {
    migration_ = cluster().begin_migration(slot_, *target_);
    migrating_ = true;
  }
  // Moves the keys and ends the migration: the slot is the target's.
  void end_migration() {
    migrating_ = false;
    cluster().migrate_keys(migration_);
    cluster().finish_migration(migration_);
    moved_ = true;
  }
  std::string key(const char* suffix) const { return detail::companion_key(name_, suffix); }
  // Whether every one of `keys` exists on the source (the condition for a
  // script over them to run there during the migration).
  bool all_on_source(const std::vector<std::string>& keys) const {
    for (const std::string& k : keys)
      if (source_->command({"EXISTS", k}).integer != 1) return false;
    return true;
  }
  RedisServer* source_ = nullptr;
  RedisServer* target_ = nullptr;
  std::string name_;
  int slot_ = 0;
  RedisCluster::Migration migration_{};
  bool migrating_ = false;
  bool moved_ = false;
};

}  // namespace lockon::test
