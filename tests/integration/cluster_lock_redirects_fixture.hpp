// integration/cluster_lock_redirects_fixture.hpp — a lock name on the
// first master whose slot a test half-moves to the second (the blocking and
// the async lock's tests of acquisitions during a slot migration).
#pragma once

#include <string>

#include "client/slots.hpp"
#include "support/raw_connection.hpp"

#include "cluster_test_fixture.hpp"

namespace lockon::test {

class ClusterLockRedirects : public ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    const auto masters = cluster().masters();
    source_ = masters[0];
    target_ = masters[1];
    name_ = name_on(*source_, "lock-ask");
    slot_ = detail::key_slot(name_);
  }
  // Stray keys the old code wrote on the target go first (MIGRATE would
  // fail with BUSYKEY on them), then the slot moves there and back.
  void TearDown() override {
    if (!migrating_) return;
    {
      RawConnection target = target_->connect();
      target.command({"ASKING"});
      target.command({"DEL", name_});
      target.command({"ASKING"});
      target.command({"DEL", "{" + name_ + "}:who"});
    }
    cluster().migrate_keys(migration_);
    cluster().finish_migration(migration_);
    const auto back = cluster().begin_migration(slot_, *source_);
    cluster().migrate_keys(back);
    cluster().finish_migration(back);
  }
  void begin_migration() {
    migration_ = cluster().begin_migration(slot_, *target_);
    migrating_ = true;
  }
  // Whether K exists on the target (ASKING: the slot is importing there).
  bool on_target(const std::string& key) const {
    RawConnection target = target_->connect();
    target.command({"ASKING"});
    return target.command({"EXISTS", key}).integer == 1;
  }

  RedisServer* source_ = nullptr;
  RedisServer* target_ = nullptr;
  std::string name_;
  int slot_ = 0;
  RedisCluster::Migration migration_{};
  bool migrating_ = false;
};

}  // namespace lockon::test
