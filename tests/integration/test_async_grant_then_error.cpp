// integration/test_async_grant_then_error.cpp — AsyncLock: the fast path's
// SET won, then a later step of the same acquisition failed (the holder
// record's SET refused; fenced: the acquisition script's error). The caller gets
// the error, and the key must not stay held for the whole lease
// (test_grant_then_error.cpp has the blocking Lock's cases).
#include <gtest/gtest.h>

#include <asio/io_context.hpp>

#include <chrono>
#include <string>

#include "integration/async_support.hpp"
#include "lock/lock_scripts.hpp"
#include "lockon/async.hpp"
#include "lockon/lockon.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

class AsyncGrantThenError : public RedisTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    proxy_ = std::make_unique<FaultProxy>(server().host(), server().port());
  }
  FaultProxy& proxy() { return *proxy_; }
  RawReply raw(const std::vector<std::string>& args) { return server().command(args); }
  void expect_takeable(const std::string& name) {
    const Client direct(server().url());
    Lock other(direct, name, {.ttl = 5s});
    EXPECT_TRUE(other.try_lock()) << "the key is still held after the failed acquisition";
    if (other.held()) other.unlock();
  }

  std::unique_ptr<FaultProxy> proxy_;
};

// AsyncLock: the holder record's SET refused after the lock's SET won
// (plain); the fenced acquisition script's error reply (fenced: nothing
// won, and the record written beside it is dropped).
TEST_P(AsyncGrantThenError, ErrorAfterAWonSetLeavesTheKeyFree) {
  const bool fenced = GetParam();
  asio::io_context io;
  AsyncClient client(io.get_executor(), proxy().url());
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock warm(client, key("warm"), LockOptions{.ttl = 5s, .fencing = true});  // EVALSHA from now on
    co_await warm.async_lock();
    co_await warm.async_unlock();
  }));
  const std::string name = key("lock");
  if (fenced)
    proxy().add_rule({.command = "EVALSHA", .action = FaultAction::error_reply,
                      .error = FaultRule::error_text("OOM"), .times = 1});
  else
    proxy().add_rule({.command = "SET", .argument_contains = detail::companion_key(name, "who"),
                      .action = FaultAction::error_reply, .error = FaultRule::error_text("NOPERM"), .times = 1});
  AsyncLock lock(client, name, LockOptions{.ttl = 30s, .fencing = fenced});
  bool threw = false;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    try {
      co_await lock.async_try_lock();
    } catch (const ReplyError&) {
      threw = true;
    }
  }));
  EXPECT_TRUE(threw);
  EXPECT_FALSE(lock.held());
  bool freed = false;
  for (int i = 0; i < 40 && !freed; ++i) {
    drain(io, 50ms);
    freed = raw({"EXISTS", name, detail::companion_key(name, "who")}).integer == 0;
  }
  EXPECT_TRUE(freed) << "the won key stayed held (PTTL " << raw({"PTTL", name}).integer << " ms)";
  expect_takeable(name);
}

INSTANTIATE_TEST_SUITE_P(FencedOrNot, AsyncGrantThenError, ::testing::Bool(),
                         [](const auto& param_info) { return param_info.param ? "fenced" : "plain"; });

}  // namespace
}  // namespace lockon::test
