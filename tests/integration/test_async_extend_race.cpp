// integration/test_async_extend_race.cpp — an extension that replaces the
// ttl with a shorter one while a renewal is in flight: the server applies
// the renewal, then the extension (one connection: their order), so the key
// ends `additional` after the extension, and lost() must say so. A review
// (session 17) suspected the renewal's reply could complete after the
// extension's and set the lease end a ttl ahead; on this path the replies
// complete in order (this test passes with and without the guard added
// then, LeaseSignal::begin_shortening, which covers the blocking watchdog's
// renewals on their own connections, where the order is not known).
#include <asio/io_context.hpp>

#include <chrono>
#include <string>
#include <thread>

#include "integration/async_support.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/async.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class AsyncExtendRace : public RedisTest {};

TEST_F(AsyncExtendRace, AShorterReplacedTtlIsNotOverwrittenByARenewalInFlight) {
  // The renewal must run as the delayed EVALSHA itself (a NOSCRIPT would
  // send its EVAL after the extension).
  ASSERT_EQ(server().command({"SCRIPT", "LOAD", detail::scripts::renew().body()}).str, detail::scripts::renew().sha());
  FaultProxy proxy(server().host(), server().port());
  asio::io_context io;
  AsyncClient client(io.get_executor(), proxy.url());
  const std::string name = key("lock");
  AsyncLock lock(client, name, LockOptions{.ttl = 3s});
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { co_await lock.async_lock(); }));
  // The first renewal (at ttl/3) waits 300 ms in the proxy; what follows it
  // on the connection waits behind it.
  const int rule = proxy.add_rule({.command = "EVALSHA", .argument_contains = detail::scripts::renew().sha(),
                                   .action = FaultAction::delay, .delay = 300ms, .times = 1});
  for (int i = 0; i < 300 && proxy.matched(rule) == 0; ++i) drain(io, 10ms);
  ASSERT_EQ(proxy.matched(rule), 1u) << "no renewal was sent";
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { co_await lock.async_extend(200ms, true); }));
  const auto extended_at = Clock::now();
  drain(io, 400ms);
  ASSERT_EQ(server().command({"EXISTS", name}).integer, 0)
      << "the key did not end 200 ms after the extension: the test proves nothing";
  EXPECT_TRUE(lock.lost()) << "the key expired " << ms_since(extended_at) - 200
                           << " ms ago, yet the lock does not know it";
}

// A shortening extension whose reply was lost (it ran), and an extension
// told the key is not ours: lost() says so at once, not at the old lease
// end (found by review, session 18).
TEST_F(AsyncExtendRace, AnExtensionWithALostReplyOrNotOwnedEndsTheLocalLease) {
  ASSERT_EQ(server().command({"SCRIPT", "LOAD", detail::scripts::extend().body()}).str,
            detail::scripts::extend().sha());
  FaultProxy proxy(server().host(), server().port());
  asio::io_context io;
  AsyncClient client(io.get_executor(), proxy.url());
  const std::string name = key("lock");
  AsyncLock lock(client, name, LockOptions{.ttl = 10s, .auto_renew = false});
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { co_await lock.async_lock(); }));
  const int rule = proxy.add_rule({.command = "EVALSHA", .argument_contains = detail::scripts::extend().sha(),
                                   .action = FaultAction::close_after_forward, .times = 1});
  bool threw = false;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    try {
      co_await lock.async_extend(100ms, true);
    } catch (const IoError&) {
      threw = true;
    }
  }));
  EXPECT_TRUE(threw);
  ASSERT_EQ(proxy.matched(rule), 1u);
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(server().command({"EXISTS", name}).integer, 0) << "the extension did not run: the test proves nothing";
  EXPECT_TRUE(lock.lost()) << "the key expired 200 ms ago; lost() waits for the old end";

  const std::string other = key("other");
  AsyncLock taken(client, other, LockOptions{.ttl = 10s, .auto_renew = false});
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { co_await taken.async_lock(); }));
  server().command({"SET", other, "someone-else"});
  bool not_owned = false;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    try {
      co_await taken.async_extend(1s);
    } catch (const LockNotOwned&) {
      not_owned = true;
    }
  }));
  EXPECT_TRUE(not_owned);
  EXPECT_TRUE(taken.lost()) << "told LockNotOwned, yet lost() waits for the old lease end";
}

}  // namespace
}  // namespace lockon::test
