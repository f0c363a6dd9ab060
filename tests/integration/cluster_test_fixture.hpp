// integration/cluster_test_fixture.hpp — the gtest fixture of the Redis
// Cluster tests (test_cluster.cpp, test_cluster_moves.cpp): a 3-master /
// 3-replica RedisCluster started once per suite.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include "client/slots.hpp"
#include "support/cluster_fixture.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!cluster_) {
      const auto start = std::chrono::steady_clock::now();
      cluster_ = std::make_unique<RedisCluster>(3, 1);
      fresh_ = true;
      std::cout << "cluster of 6 nodes formed in " << ms_since(start) << " ms (" << cluster_->formation_report()
                << ")\n";
    }
  }
  static void TearDownTestSuite() { cluster_.reset(); }
  // Settled, not just agreeing on slot owners: an earlier test in this
  // process may have failed a master over (its old master resyncs). A
  // cluster just formed has passed the same check.
  void SetUp() override {
    if (!fresh_) cluster_->wait_settled(std::chrono::seconds(20));
    fresh_ = false;
  }

  static RedisCluster& cluster() { return *cluster_; }
  // A lock name (unique per call) whose slot is served by `master`.
  static std::string name_on(const RedisServer& master, const std::string& tag) {
    for (int i = 0; i < 100'000; ++i) {
      std::string name = unique_key(tag + "-" + std::to_string(i));
      if (&cluster().owner_of_slot(detail::key_slot(name)) == &master) return name;
    }
    throw std::runtime_error("no name for master " + std::to_string(master.port()));
  }

 private:
  static inline std::unique_ptr<RedisCluster> cluster_;
  static inline bool fresh_ = false;
};

}  // namespace lockon::test
