// integration/release_faults_support.hpp — releases that fail, on both
// fronts (test_release_faults.cpp, test_async_release_faults.cpp,
// test_async_cleanup_schedule.cpp): refusing a script at the proxy, and what
// a release must leave behind when its key was taken over.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "lockon/errors.hpp"
#include "protocol/lock_scripts.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {

/// Takes `name` over as another owner would (its key rewritten).
inline void take_over(RedisServer& server, const std::string& name) {
  server.command({"SET", name, "someone-else", "PX", "30000"});
}

/// Makes `proxy` refuse (NOPERM, nothing run) the next `times` runs of
/// `script` by SHA (a lock's release, its clean-up's cancel...); the rule's
/// id, for proxy.matched(). times -1: every run.
inline int refuse_script(FaultProxy& proxy, const detail::Script& script, int times = 1) {
  return proxy.add_rule({.command = "EVALSHA",
                         .argument_contains = script.sha(),
                         .action = FaultAction::error_reply,
                         .error = FaultRule::error_text("NOPERM"),
                         .times = times});
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
