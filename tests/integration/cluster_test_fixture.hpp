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
      std::cout << "cluster of 6 nodes formed in " << ms_since(start) << " ms\n";
    }
  }
  static void TearDownTestSuite() { cluster_.reset(); }
  void SetUp() override { cluster_->wait_consistent(std::chrono::seconds(20)); }

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
};

}  // namespace lockon::test
