// integration/release_faults_support.hpp — what a release must leave behind
// when its key was taken over, on both fronts (test_release_faults.cpp,
// test_async_release_faults.cpp).
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "lockon/errors.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {

/// Takes `name` over as another owner would (its key rewritten).
inline void take_over(RedisServer& server, const std::string& name) {
  server.command({"SET", name, "someone-else", "PX", "30000"});
}

/// The release of a key taken over: the holder is told (its lease lost,
/// LockNotOwned), and the other owner's key is left alone.
template <class AnyLock>
void expect_released_a_taken_key(const AnyLock& lock, RedisServer& server, const std::string& name) {
  EXPECT_TRUE(lock.lost());
  ASSERT_NE(lock.last_unlock_error(), nullptr);
  EXPECT_THROW(std::rethrow_exception(lock.last_unlock_error()), LockNotOwned);
  EXPECT_EQ(server.command({"GET", name}).str, "someone-else") << "another owner's key was released";
}

}  // namespace lockon::test
