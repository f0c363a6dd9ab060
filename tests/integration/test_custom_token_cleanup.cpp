// integration/test_custom_token_cleanup.cpp — a custom token is the same on
// every acquisition, so the background clean-up of an earlier attempt (it
// releases whatever holds the token: its sweeps run ~20 ms, ~70 ms and ~1 s
// after the failure) must not touch a later acquisition with that token.
// Before session 17 it deleted the new holder's key: two holders, the first
// one told nothing until its next renewal (found by review).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "protocol/lock_scripts.hpp"
#include "lockon/lockon.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class CustomTokenCleanup : public RedisTest {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    proxy_ = std::make_unique<FaultProxy>(server().host(), server().port());
  }
  FaultProxy& proxy() { return *proxy_; }
  RawReply raw(const std::vector<std::string>& args) { return server().command(args); }
  // Loads the lock scripts through `client`: EVALSHA from now on, so a
  // rule on EVALSHA meets the command under test, not a NOSCRIPT retry.
  void warm_scripts(const Client& client) {
    Lock warm(client, key("warm"), {.ttl = 5s});
    ASSERT_TRUE(warm.try_lock());
    warm.unlock();
  }
  // A permit's scripts loaded through `client` (EVALSHA from now on).
  void warm_permit_scripts(const Client& client) {
    auto warm = SharedLeaseLock::permit(client, key("warm-sem"), 1, {.ttl = 5s});
    ASSERT_TRUE(warm->try_lock());
    warm->unlock();
  }
  // The next request carrying `token` runs but its reply is lost, and the
  // one after (its immediate cancel) never reaches the server. The rules' ids.
  std::pair<int, int> lose_attempt_and_cancel(const std::string& token) {
    const int lost = proxy().add_rule(
        {.command = "EVALSHA", .argument_contains = token, .action = FaultAction::close_after_forward, .times = 1});
    const int cancel = proxy().add_rule(
        {.command = "EVALSHA", .argument_contains = token, .action = FaultAction::close_before_forward, .times = 1});
    return {lost, cancel};
  }
  // Watches `name` for 1.5 s (past the clean-up's last sweep): it must hold
  // `token` all along. Returns the ms after which it did not (-1: never).
  long long first_loss_ms(const std::string& name, const std::string& token) {
    const auto start = Clock::now();
    while (Clock::now() - start < 1500ms) {
      const RawReply value = raw({"GET", name});
      if (value.is_nil() || value.str != token) return ms_since(start);
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }
  std::unique_ptr<FaultProxy> proxy_;
};

// The release ran but its reply was lost: the clean-up is adopted (unknown
// outcome, three sweeps). The same Lock acquires again at once.
TEST_F(CustomTokenCleanup, AReleaseWithALostReplyDoesNotReleaseTheNextAcquisition) {
  const Client client(proxy().url());
  const std::string name = key("lock");
  const std::string token = "custom-token-" + name;
  ASSERT_NO_FATAL_FAILURE(warm_scripts(client));
  Lock lock(client, name, {.ttl = 30s, .token = token});
  ASSERT_TRUE(lock.try_lock());
  const int rule = proxy().add_rule(
      {.command = "EVALSHA", .argument_contains = name, .action = FaultAction::close_after_forward, .times = 1});
  lock.unlock();
  ASSERT_EQ(proxy().matched(rule), 1u);
  ASSERT_NE(lock.last_unlock_error(), nullptr);
  ASSERT_TRUE(lock.try_lock_for(1s)) << "the released key was not taken again";
  EXPECT_EQ(first_loss_ms(name, token), -1) << "the earlier release's clean-up released the new acquisition";
  EXPECT_TRUE(lock.held());
  EXPECT_TRUE(lock.owned());
  Lock other(client, name, {.ttl = 5s});
  EXPECT_FALSE(other.try_lock()) << "a second holder got in";
  lock.unlock();
  EXPECT_EQ(lock.last_unlock_error(), nullptr);
}

// The acquisition's own reply was lost (IoError: a custom token cannot tell
// its grant from another holder's); the caller retries at once. The retry
// must find the key cleaned up, and must not be undone by the follow-up
// sweeps.
TEST_F(CustomTokenCleanup, AnAcquisitionWithALostReplyDoesNotReleaseTheNextOne) {
  const Client client(proxy().url());
  const std::string name = key("lock");
  const std::string token = "custom-token-" + name;
  proxy().add_rule({.command = "SET", .argument_contains = name, .action = FaultAction::close_after_forward,
                    .times = 1});
  Lock lock(client, name, {.ttl = 30s, .token = token});
  EXPECT_THROW(lock.try_lock(), IoError);
  // At once, as a caller retrying would: the pending clean-up runs first
  // (it frees what the lost request won), and never again after.
  bool again = false;
  EXPECT_NO_THROW(again = lock.try_lock_for(1s)) << "the lost request's key was not cleaned up first";
  ASSERT_TRUE(again);
  EXPECT_EQ(first_loss_ms(name, token), -1) << "a follow-up sweep released the new acquisition";
  EXPECT_TRUE(lock.owned());
  lock.unlock();
}

// A Semaphore permit with a custom token (SharedLeaseLock): its member in
// the holders' set is the token, so an earlier attempt's clean-up (ZREM)
// removed the later share, and a second holder got the only permit.
TEST_F(CustomTokenCleanup, APermitWhoseAttemptReplyWasLostDoesNotLoseTheNextOne) {
  const Client client(proxy().url());
  const std::string name = key("sem");
  const std::string token = "custom-share-" + name;
  ASSERT_NO_FATAL_FAILURE(warm_permit_scripts(client));
  auto permit = SharedLeaseLock::permit(client, name, 1, {.ttl = 30s, .token = token});
  // Its immediate cancel is lost too: the clean-up goes to the background.
  const auto [rule, cancel_rule] = lose_attempt_and_cancel(token);
  bool first = false;
  try {
    first = permit->try_lock();
  } catch (const Error&) {
  }
  ASSERT_EQ(proxy().matched(rule), 1u);
  ASSERT_EQ(proxy().matched(cancel_rule), 1u);
  if (first) permit->unlock();
  ASSERT_TRUE(permit->try_lock_for(2s)) << "the permit was not taken again";
  const Client direct(server().url());
  auto rival = SharedLeaseLock::permit(direct, name, 1, {.ttl = 5s});
  const auto start = Clock::now();
  long long rival_in_after = -1;
  while (Clock::now() - start < 1500ms && rival_in_after < 0) {
    if (rival->try_lock()) rival_in_after = ms_since(start);
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(rival_in_after, -1) << "the earlier attempt's clean-up removed the new share: a second holder";
  if (rival->held()) rival->unlock();
  EXPECT_TRUE(permit->owned());
  permit->unlock();
}

// The earlier attempt's clean-up cannot run first (the server stalls):
// lock() must throw, not return as if it held the lock (review of session
// 17's own fix: the first version returned false, and lock() ignored it).
TEST_F(CustomTokenCleanup, LockThrowsWhenTheEarlierCleanUpCannotRun) {
  const Client client(proxy().url() + "?socket_timeout=300&connect_timeout=300");
  const std::string name = key("lock");
  const std::string token = "custom-token-" + name;
  ASSERT_NO_FATAL_FAILURE(warm_scripts(client));
  Lock lock(client, name, {.ttl = 30s, .token = token});
  ASSERT_TRUE(lock.try_lock());
  proxy().add_rule(
      {.command = "EVALSHA", .argument_contains = name, .action = FaultAction::close_after_forward, .times = 1});
  proxy().add_rule({.action = FaultAction::blackhole});  // then nothing is answered
  lock.unlock();
  ASSERT_NE(lock.last_unlock_error(), nullptr);
  const auto start = Clock::now();
  bool threw = false;
  try {
    lock.lock();
  } catch (const IoError&) {
    threw = true;
  }
  EXPECT_TRUE(threw) << "lock() ended without an exception; held: " << lock.held();
  EXPECT_FALSE(lock.held());
  EXPECT_LT(ms_since(start), 5000);
  proxy().clear_rules();
}

// MultiLock's single-script path with a custom token: an earlier attempt's
// clean-up must not release the keys it takes later.
TEST_F(CustomTokenCleanup, MultiLockInOneScriptIsNotReleasedByAnEarlierCleanUp) {
  const Client client(proxy().url());
  const std::string base = key("multi");
  const std::vector<std::string> names{"{" + base + "}:a", "{" + base + "}:b"};
  const std::string token = "custom-token-" + base;
  ASSERT_NO_FATAL_FAILURE(warm_scripts(client));
  MultiLock both(client, names, {.ttl = 30s, .token = token});
  ASSERT_TRUE(both.try_lock());
  // Both releases run, their replies lost: clean-ups with the token.
  proxy().add_rule({.command = "EVALSHA", .argument_contains = base, .action = FaultAction::close_after_forward,
                    .times = 2});
  both.unlock();
  proxy().clear_rules();
  ASSERT_TRUE(both.try_lock_for(1s));
  for (const std::string& name : names) {
    EXPECT_EQ(first_loss_ms(name, token), -1) << name << ": an earlier clean-up released the new acquisition";
  }
  both.unlock();
}

// A permit's earlier clean-up runs first, on the caller's thread, and the
// server stops answering: try_lock_for must still end by its deadline. The
// share's clean-up read its reply within the socket timeout (2 s here)
// whatever the caller's deadline (a Lock's was bounded; found by review,
// session 17, fixed in session 18).
TEST_F(CustomTokenCleanup, APermitsEarlierCleanUpIsBoundedByTheCallersDeadline) {
  const Client client(proxy().url() + "?socket_timeout=2000&connect_timeout=2000");
  const std::string name = key("sem");
  const std::string token = "custom-share-" + name;
  ASSERT_NO_FATAL_FAILURE(warm_permit_scripts(client));
  auto permit = SharedLeaseLock::permit(client, name, 1, {.ttl = 30s, .token = token});
  // The attempt's reply is lost and so is its immediate cancel: a clean-up
  // with the token is pending (its first background sweep ~20 ms later).
  const auto [rule, cancel_rule] = lose_attempt_and_cancel(token);
  EXPECT_THROW(permit->try_lock(), IoError);
  ASSERT_EQ(proxy().matched(rule), 1u);
  ASSERT_EQ(proxy().matched(cancel_rule), 1u);
  proxy().add_rule({.action = FaultAction::blackhole});  // nothing is answered from now on
  const auto start = Clock::now();
  bool acquired = true;
  try {
    acquired = permit->try_lock_for(100ms);
  } catch (const Error& e) {
    ADD_FAILURE() << "an acquisition that ran out of time threw: " << e.what();
  }
  const long long took = ms_since(start);
  EXPECT_FALSE(acquired);
  EXPECT_LT(took, 600) << "the earlier clean-up held the caller past its 100 ms deadline";
  proxy().clear_rules();
}

// The release's reply was lost on one Client; the same token and key are
// taken at once through another Client object of the process. The earlier
// release's clean-up (filed by the first Client) must run before, not
// after: forget() matched clean-ups by Client, and released the new
// acquisition (found by review, session 18).
TEST_F(CustomTokenCleanup, AnotherClientsEarlierCleanUpDoesNotReleaseTheAcquisition) {
  const Client first(proxy().url());
  const Client second(server().url());
  const std::string name = key("lock");
  const std::string token = "custom-token-" + name;
  ASSERT_NO_FATAL_FAILURE(warm_scripts(first));
  Lock before(first, name, {.ttl = 30s, .token = token});
  ASSERT_TRUE(before.try_lock());
  const int rule = proxy().add_rule(
      {.command = "EVALSHA", .argument_contains = name, .action = FaultAction::close_after_forward, .times = 1});
  before.unlock();
  ASSERT_EQ(proxy().matched(rule), 1u);
  ASSERT_NE(before.last_unlock_error(), nullptr);
  Lock after(second, name, {.ttl = 30s, .token = token});
  ASSERT_TRUE(after.try_lock_for(1s));
  EXPECT_EQ(first_loss_ms(name, token), -1) << "the first Client's clean-up released the second's acquisition";
  Lock rival(second, name, {.ttl = 5s});
  EXPECT_FALSE(rival.try_lock()) << "a second holder got in";
  after.unlock();
}

// A clean-up pending on another server (same key and token, another
// Client) is not this acquisition's business: matched by key and token
// alone, it ran first, here, against a server that answered nothing, and
// held the acquisition to its deadline (found by review of this session's
// fix above).
TEST_F(CustomTokenCleanup, AnotherServersPendingCleanUpDoesNotHoldTheAcquisition) {
  RedisServer other;
  FaultProxy other_proxy(other.host(), other.port());
  const Client on_other(other_proxy.url() + "?socket_timeout=300&connect_timeout=300");
  const Client here(server().url());
  const std::string name = key("lock");
  const std::string token = "custom-token-" + name;
  ASSERT_NO_FATAL_FAILURE(warm_scripts(on_other));
  Lock there(on_other, name, {.ttl = 30s, .token = token});
  ASSERT_TRUE(there.try_lock());
  other_proxy.add_rule(
      {.command = "EVALSHA", .argument_contains = name, .action = FaultAction::close_after_forward, .times = 1});
  other_proxy.add_rule({.action = FaultAction::blackhole});  // then nothing is answered there
  there.unlock();
  ASSERT_NE(there.last_unlock_error(), nullptr);
  Lock mine(here, name, {.ttl = 30s, .token = token});
  const auto start = Clock::now();
  bool got = false;
  EXPECT_NO_THROW(got = mine.try_lock_for(1s));
  EXPECT_TRUE(got);
  EXPECT_LT(ms_since(start), 200) << "held by another server's clean-up";
  if (mine.held()) mine.unlock();
  other_proxy.clear_rules();
}

}  // namespace
}  // namespace lockon::test
