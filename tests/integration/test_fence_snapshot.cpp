// integration/test_fence_snapshot.cpp — fences after the fence counter came
// back stale: the server reloaded an older snapshot (a restart from RDB, or
// a failover to a replica that lagged: the counter exists, with an old
// value). Every fence must still exceed every fence handed out before.
// Before session 17 the uncontended path INCRed the counter and handed out
// the same fences again (found by review); now every fence is
// max(last + 1, the server's clock in µs).
#include <gtest/gtest.h>


#include <cstdint>
#include <string>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

TEST(FenceSnapshot, FencesAfterAStaleCounterExceedEveryEarlierOne) {
  RedisServer own;
  const Client client(own.url());
  Lock lock(client, "k", {.ttl = 10s, .fencing = true});
  std::vector<std::uint64_t> fences;
  const auto cycle = [&] {
    if (!lock.try_lock()) return false;
    fences.push_back(lock.fence());
    lock.unlock();
    return true;
  };
  ASSERT_TRUE(cycle());
  ASSERT_TRUE(own.command({"SAVE"}).is("OK"));  // the snapshot: the counter at the first fence
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cycle());
  // Back to the snapshot, as a restart from it would be.
  ASSERT_TRUE(own.command({"DEBUG", "RELOAD", "NOSAVE"}).is("OK")) << own.log_tail();
  const Client fresh(own.url());
  Lock after(fresh, "k", {.ttl = 10s, .fencing = true});
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(after.try_lock());
    const std::uint64_t fence = after.fence();
    after.unlock();
    EXPECT_GT(fence, fences.back()) << "fence " << fence << " after the reload repeats or precedes an earlier one";
    fences.push_back(fence);
  }
}

}  // namespace
}  // namespace lockon::test
