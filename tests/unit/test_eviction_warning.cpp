// unit/test_eviction_warning.cpp — which maxmemory settings lockon warns
// about (client/eviction_check.hpp); the check itself runs against real
// servers in integration/test_eviction.cpp.
#include <gtest/gtest.h>

#include <string>

#include "client/eviction_check.hpp"

namespace {

using lockon::detail::eviction_warning;

TEST(EvictionWarning, OnlyALimitWithAnEvictingPolicyIsReported) {
  EXPECT_TRUE(eviction_warning("h:1", "0", "allkeys-lru").empty());            // no limit: never evicts
  EXPECT_TRUE(eviction_warning("h:1", "104857600", "noeviction").empty());     // refuses writes instead
  EXPECT_TRUE(eviction_warning("h:1", "", "").empty());                        // nothing known: no claim
  for (const char* policy : {"allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu",
                             "volatile-random", "volatile-ttl"}) {
    const std::string message = eviction_warning("10.0.0.1:6379", "104857600", policy);
    EXPECT_NE(message.find("10.0.0.1:6379"), std::string::npos) << policy;
    EXPECT_NE(message.find(std::string("maxmemory-policy ") + policy), std::string::npos) << message;
    EXPECT_NE(message.find("noeviction"), std::string::npos) << message;
  }
}

}  // namespace
