// What `min-replicas-to-write` on the data servers does for a client left on
// the old master after a Sentinel failover (README, Sentinel: "Closing it on
// the server side").
//
// lockon's own clients leave the old master within ~20 ms of the promotion
// (test_sentinel_failover_window.cpp), but a client that cannot hear the
// sentinels (unreachable, or paused across the promotion) keeps its route:
// without the setting the old master grants it the same locks the new one
// grants, until Sentinel demotes it (≥ 9 s in the trial of issue 33). With
// `min-replicas-to-write 1` and `min-replicas-max-lag 1` the old master must
// refuse it soon after Sentinel moves the other replica away, with an error
// that says why, and never grant again. Here the stale client is a plain
// redis:// client of the old master, the worst case: it never re-resolves.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "integration/sentinel_failover_support.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "support/sentinel_fixture.hpp"
#include "support/steady_time.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// From the promotion to the old master's last grant: the leader sees the
// promotion within its 1 s INFO period and moves the other replica at once;
// the old master then counts no good replica (the link closes; at most
// min-replicas-max-lag, 1 s, for a replica that stopped acknowledging). The
// bound leaves a loaded 2-core VM about a second more.
constexpr auto kRefusedWithin = 3000ms;

TEST(SentinelMinReplicas, TheOldMasterRefusesAStaleClientSoonAfterThePromotionAndNeverGrantsAgain) {
  SentinelSet set(SentinelSetOptions{.replicas = 2, .failover_timeout = 10s});
  for (std::size_t i = 0; i < set.data_server_count(); ++i) {
    ASSERT_TRUE(set.data_server(i).command({"CONFIG", "SET", "min-replicas-to-write", "1"}).is("OK"));
    ASSERT_TRUE(set.data_server(i).command({"CONFIG", "SET", "min-replicas-max-lag", "1"}).is("OK"));
  }
  const int old_port = set.master().port();
  Client stale("redis://127.0.0.1:" + std::to_string(old_port) + kShortTimeouts);
  const std::string name = unique_key("min-replicas");
  const std::string token = "min-replicas-token-8f3a2c";  // looked for in the refusal's text
  Lock lock(stale, name, {.ttl = 2s, .auto_renew = false, .token = token});
  // Both replicas acknowledging: the old master grants.
  ASSERT_TRUE(eventually(10s, [&] {
    try {
      if (!lock.try_lock()) return false;
      lock.unlock();
      return true;
    } catch (const Error&) {
      return false;
    }
  }, 20ms)) << "the master never granted with its replicas in sync:\n" << set.logs();

  // Every call's outcome and when it ended: judged against the promotion
  // afterwards (a replica's acknowledgement late under load can refuse a
  // moment before the failover too; that is not what is tested).
  std::mutex mutex;
  std::vector<Clock::time_point> grant_times;
  std::vector<std::pair<Clock::time_point, std::string>> refusals;  // NOREPLICAS
  int other_errors = 0;
  std::atomic<bool> stop{false};
  PromotionWatch watch(set);
  std::thread stale_caller([&] {
    const auto until = Clock::now() + 25s;
    while (!stop && Clock::now() < until) {
      try {
        const bool granted = lock.try_lock();
        if (granted) lock.unlock();
        std::lock_guard guard(mutex);
        if (granted) grant_times.push_back(Clock::now());
      } catch (const ReplyError& error) {
        std::lock_guard guard(mutex);
        if (std::string(error.what()).find("NOREPLICAS") != std::string::npos)
          refusals.emplace_back(Clock::now(), error.what());
        else
          ++other_errors;  // READONLY once Sentinel demotes the old master
      } catch (const Error&) {
        std::lock_guard guard(mutex);
        ++other_errors;
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  struct Join {
    std::thread& thread;
    std::atomic<bool>& stop;
    ~Join() {
      stop = true;
      if (thread.joinable()) thread.join();
    }
  } join{stale_caller, stop};

  ASSERT_TRUE(set.sentinel_command_at(0, {"SENTINEL", "FAILOVER", SentinelSet::kMasterName}).is("OK"));
  const int new_port = watch.wait();
  ASSERT_NE(new_port, 0) << "no replica was promoted:\n" << set.logs();
  const auto promoted = watch.promoted_at();
  // The first refusal after the promotion (none: max).
  const auto first_refusal_after = [&] {
    for (const auto& [at, text] : refusals)
      if (at > promoted) return at;
    return Clock::time_point::max();
  };
  // Keep calling past the bound, and on until the old master refused for a
  // second (or was demoted): any grant in that time would be a second holder.
  ASSERT_TRUE(eventually(20s, [&] {
    std::lock_guard guard(mutex);
    const auto refused_at = first_refusal_after();
    return Clock::now() > promoted + kRefusedWithin && refused_at != Clock::time_point::max() &&
           Clock::now() > refused_at + 1s;
  }, 20ms)) << "the old master never refused the stale client (" << grant_times.size() << " grants, "
            << other_errors << " other errors):\n" << set.logs();
  stop = true;
  stale_caller.join();

  std::lock_guard guard(mutex);
  const auto refused_at = first_refusal_after();
  std::string refusal;
  for (const auto& [at, text] : refusals)
    if (at == refused_at) refusal = text;
  Clock::time_point last_grant{};
  int grants_after_refusal = 0;
  for (const auto at : grant_times) {
    last_grant = std::max(last_grant, at);
    if (at > refused_at) ++grants_after_refusal;
  }
  std::printf("[min-replicas] old master: last grant %lld ms after the promotion, first NOREPLICAS %lld ms after; "
              "%zu grants, %zu refusals, %d other errors\n",
              ms_between(promoted, last_grant), ms_between(promoted, refused_at), grant_times.size(), refusals.size(),
              other_errors);
  EXPECT_LT(last_grant, promoted + kRefusedWithin) << "the old master granted " << ms_between(promoted, last_grant)
                                                   << " ms after the promotion";
  EXPECT_EQ(grants_after_refusal, 0) << "the old master granted again after refusing";
  // The refusal says why, and shows no token.
  EXPECT_NE(refusal.find("Not enough good replicas"), std::string::npos) << refusal;
  EXPECT_EQ(refusal.find(token), std::string::npos) << refusal;
}

}  // namespace
}  // namespace lockon::test
