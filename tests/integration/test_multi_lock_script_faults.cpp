// integration/test_multi_lock_script_faults.cpp — fault tests against
// MultiLock's single-script path (src/multi/one_script.cpp): an error reply
// injected in place of the acquire_all script leaves no key held or
// half-held; a connection dropped after the script was sent (outcome
// unknown) leaves keys that the clean-up frees within a bound, so that a
// competing acquirer gets every key.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lockon/lockon.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class MultiLockScriptFaults : public RedisTest {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    proxy_ = std::make_unique<FaultProxy>(server().host(), server().port());
  }
  FaultProxy& proxy() { return *proxy_; }
  RawReply raw(const std::vector<std::string>& args) { return server().command(args); }
  bool exists(const std::string& name) { return raw({"EXISTS", name}).integer == 1; }

  std::unique_ptr<FaultProxy> proxy_;
};

// An error reply in the script's place (the script never ran): the call
// fails typed or falls back, and no key is left held or half-held.
TEST_F(MultiLockScriptFaults, ErrorReplyOnTheScriptLeavesNoKeyHeld) {
  const Client client(proxy().url());
  for (const std::string code : {"OOM", "BUSY", "READONLY", "NOSCRIPT"}) {
    const std::string base = key("err");
    const std::vector<std::string> names{base + ":a", base + ":b", base + ":c"};
    // NOSCRIPT twice: the EVALSHA and the EVAL retry both refused.
    const int times = code == "NOSCRIPT" ? 2 : 1;
    const int rule = proxy().add_rule({.command = "EVALSHA", .argument_contains = names[0],
                                       .action = FaultAction::error_reply, .error = FaultRule::error_text(code),
                                       .times = times});
    proxy().add_rule({.command = "EVAL", .argument_contains = names[0], .action = FaultAction::error_reply,
                      .error = FaultRule::error_text(code), .times = times});
    MultiLock all(client, names, {.ttl = 5s, .fencing = true, .holder_label = "faults"});
    bool acquired = false;
    try {
      acquired = all.try_lock();
    } catch (const Error&) {
      acquired = false;  // typed: a lockon error
    }
    EXPECT_GE(proxy().matched(rule), 1u) << code << ": the script was not refused";
    proxy().clear_rules();
    if (acquired) {
      // A fallback that took the keys: every key is held whole, by this lock.
      ASSERT_TRUE(all.owned()) << code;
      for (const auto& name : names) EXPECT_TRUE(exists(name)) << code << " " << name;
      all.unlock();
    }
    for (const auto& name : names) {
      EXPECT_FALSE(exists(name)) << code << ": " << name << " left held";
      EXPECT_FALSE(exists(lock_companion_key(name, "who"))) << code << ": record of " << name << " left";
      EXPECT_EQ(raw({"LLEN", lock_companion_key(name, "q")}).integer, 0) << code;
    }
    MultiLock other(client, names, {.ttl = 5s});
    EXPECT_TRUE(other.try_lock()) << code << ": a second acquirer could not take the free keys";
    if (other.owned()) other.unlock();
  }
}

// The script ran but its reply was lost with the connection: whatever it
// set is cleaned up, and a competing acquirer gets every key within a bound
// (the TTL at most); the two never hold at once.
TEST_F(MultiLockScriptFaults, DroppedScriptReplyIsCleanedUpAndACompetitorGetsEveryKey) {
  const Client client(proxy().url());
  const std::string base = key("drop");
  const std::vector<std::string> names{base + ":a", base + ":b", base + ":c"};
  const int rule = proxy().add_rule(
      {.command = "EVALSHA", .argument_contains = names[0], .action = FaultAction::close_after_forward, .times = 1});
  proxy().add_rule(
      {.command = "EVAL", .argument_contains = names[0], .action = FaultAction::close_after_forward, .times = 1});
  MultiLock first(client, names, {.ttl = 2s});
  bool first_held = false;
  try {
    first_held = first.try_lock();
  } catch (const Error&) {
    first_held = false;
  }
  EXPECT_EQ(proxy().matched(rule), 1u) << "the script's reply was not dropped";
  proxy().clear_rules();
  if (first_held) {
    ASSERT_TRUE(first.owned());
    const std::string token = raw({"GET", names[0]}).str;
    ASSERT_FALSE(token.empty());
    MultiLock rival(client, names, {.ttl = 2s});
    EXPECT_FALSE(rival.try_lock()) << "two holders at once";
    first.unlock();
  }
  // Bounded: the clean-up or the TTL frees every key within 2 s + slack.
  MultiLock competitor(client, names, {.ttl = 5s});
  const auto until = Clock::now() + 6s;
  bool got = false;
  for (int round = 0; round < 120 && Clock::now() < until && !got; ++round) {
    got = competitor.try_lock();
    if (!got) std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(got) << "the keys the lost script set were never freed";
  const std::string token = raw({"GET", names[0]}).str;
  for (const auto& name : names) EXPECT_EQ(raw({"GET", name}).str, token) << name << " not held whole";
  competitor.unlock();
  for (const auto& name : names) EXPECT_FALSE(exists(name));
}

// With the caller's own token, a lost script reply must not fall back to
// the ordered path: that path would take the keys with the same token while
// the clean-up of the lost attempt (release where the key holds that token)
// is queued, and could free them under the new holder. It fails instead, as
// a single Lock with a custom token does (found by reading one_script.cpp).
TEST_F(MultiLockScriptFaults, CustomTokenWithADroppedScriptReplyFailsAndHoldsNothing) {
  const Client client(proxy().url());
  const std::string base = key("own-token");
  const std::vector<std::string> names{base + ":a", base + ":b"};
  const int rule = proxy().add_rule(
      {.command = "EVALSHA", .argument_contains = names[0], .action = FaultAction::close_after_forward, .times = 1});
  proxy().add_rule(
      {.command = "EVAL", .argument_contains = names[0], .action = FaultAction::close_after_forward, .times = 1});
  MultiLock mine(client, names, {.ttl = 2s, .token = std::string("caller-chosen-token-0123456789ab")});
  EXPECT_THROW(static_cast<void>(mine.try_lock_for(3s)), IoError);
  EXPECT_EQ(proxy().matched(rule), 1u) << "the script's reply was not dropped";
  proxy().clear_rules();
  EXPECT_FALSE(mine.owned());
  // The clean-up (or the TTL) frees both keys; nobody believes it holds them.
  MultiLock competitor(client, names, {.ttl = 5s});
  bool got = false;
  const auto until = Clock::now() + 6s;
  for (int round = 0; round < 120 && Clock::now() < until && !got; ++round) {
    got = competitor.try_lock();
    if (!got) std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(got) << "the keys the lost script set were never freed";
  EXPECT_FALSE(mine.owned());
  competitor.unlock();
}

}  // namespace
}  // namespace lockon::test
