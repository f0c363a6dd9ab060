// integration/test_async_handed_record.cpp — an AsyncLock handed the key
// by a release keeps the record of that hand-over ({K}:hs, "the process the
// last hand-over went to") alive with its renewals, as the blocking Lock
// does: if the holder is then paused past its lease, the next waiter drops
// the paused process's other queued waiters instead of handing the key to
// each for one more lease (test_lock_paused_waiters.cpp has the whole
// scenario across processes for Lock). Attacked: a record naming another
// process is not kept alive by our renewals.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"
#include "support/redis_server.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kLease = 300ms;

// A blocking holder releases once an AsyncLock has queued behind it, so the
// AsyncLock gets the key by hand-over; then it holds for `hold` (renewed).
class AsyncHandedRecord : public ::testing::Test {
 protected:
  RedisServer server;
  const std::string name = "handed:async";
  const std::string record_key = lock_companion_key(name, "hs");

  long long queue_length() { return server.command({"LLEN", lock_companion_key(name, "q")}).integer; }

  // Runs `while_holding` on the io thread after the hand-over, then unlocks.
  template <class WhileHolding>
  void hand_over_and_hold(WhileHolding while_holding, bool auto_renew = true) {
    const Client blocking(server.url());
    Lock holder(blocking, name, {.ttl = 30s});
    ASSERT_TRUE(holder.try_lock());
    std::atomic<bool> released{false};
    std::thread releaser([&] {
      const auto until = Clock::now() + 5s;
      while (queue_length() < 1 && Clock::now() < until) std::this_thread::sleep_for(2ms);
      released = true;  // before: the hand-over may reach the waiter before unlock() returns
      holder.unlock();
    });
    asio::io_context io;
    AsyncClient client(io.get_executor(), server.url());
    const bool finished = run_on(io, [&]() -> asio::awaitable<void> {
      AsyncLock lock(client, name, {.ttl = kLease, .auto_renew = auto_renew, .wait_poll_interval = 5s});
      const bool acquired = co_await lock.async_try_lock_for(5s);
      EXPECT_TRUE(acquired) << "the AsyncLock was not handed the key";
      if (!acquired) co_return;
      EXPECT_TRUE(released.load()) << "acquired before the holder released";
      co_await while_holding(lock);
      co_await lock.async_unlock();
    });
    releaser.join();
    EXPECT_TRUE(finished);
  }
};

TEST_F(AsyncHandedRecord, RenewalsKeepTheRecordOfTheHandOverToThisProcess) {
  std::string during;
  long long pttl = -2;
  hand_over_and_hold([&](AsyncLock& lock) -> asio::awaitable<void> {
    co_await sleep_for(kLease * 3);  // past the record's own 2 x ttl
    EXPECT_FALSE(lock.lost());
    during = server.command({"GET", record_key}).str;
    pttl = server.command({"PTTL", record_key}).integer;
  });
  EXPECT_FALSE(during.empty()) << "the record of the hand-over lapsed while its process held the key";
  // One ttl past the lease, as the hand-over writes it (≤ lease + ttl).
  EXPECT_GT(pttl, kLease.count() / 2);
  EXPECT_LE(pttl, 2 * kLease.count());
}

// Without renewals, an extension by hand keeps the record one ttl past
// the longer lease.
TEST_F(AsyncHandedRecord, AnExtensionKeepsTheRecordOfTheHandOverToThisProcess) {
  std::string during;
  long long pttl = -2;
  long long lease_pttl = -2;
  hand_over_and_hold(
      [&](AsyncLock& lock) -> asio::awaitable<void> {
        co_await lock.async_extend(kLease * 4);
        co_await sleep_for(kLease * 3);  // past the record's own 2 x ttl, inside the extended lease
        EXPECT_FALSE(lock.lost());
        during = server.command({"GET", record_key}).str;
        pttl = server.command({"PTTL", record_key}).integer;
        lease_pttl = server.command({"PTTL", name}).integer;
      },
      false);
  EXPECT_FALSE(during.empty()) << "the record of the hand-over lapsed before the extended lease";
  EXPECT_GT(lease_pttl, 0);
  EXPECT_GT(pttl, lease_pttl) << "the record must outlive the lease (by one ttl)";
  EXPECT_LE(pttl, lease_pttl + kLease.count() + 250);  // + the time between the two PTTLs
}

TEST_F(AsyncHandedRecord, ARecordNamingAnotherProcessIsNotKeptAlive) {
  bool gone = false;
  hand_over_and_hold([&](AsyncLock& lock) -> asio::awaitable<void> {
    // As if a later hand-over had named another process (which the
    // renewer must never vouch for).
    EXPECT_TRUE(server.command({"SET", record_key, "someone-else", "PX", "200"}).is("OK"));
    co_await sleep_for(kLease * 2);  // several renewals
    EXPECT_FALSE(lock.lost());
    gone = server.command({"EXISTS", record_key}).integer == 0;
  });
  EXPECT_TRUE(gone) << "our renewals kept another process's hand-over record alive";
}

// A holder that took the key directly, with another AsyncLock of its
// process queued behind it: the waiter names its process as it queues (the
// holder's token ends in its process's nonce; the holder record, when
// written, says the same), and the holder's renewals keep that record while
// it names their process.
class AsyncDirectHolder : public AsyncHandedRecord, public ::testing::WithParamInterface<bool> {};

TEST_P(AsyncDirectHolder, AWaiterOfTheHoldersProcessNamesItAndTheHoldersRenewalsKeepIt) {
  const bool holder_record = GetParam();
  asio::io_context io;
  AsyncClient client(io.get_executor(), server.url());
  std::string during;
  bool waiter_got_it = false;
  const bool finished = run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock holder(client, name, {.ttl = kLease, .holder_record = holder_record});
    co_await holder.async_lock();
    AsyncLock waiter(client, name, {.ttl = kLease, .wait_poll_interval = 5s, .holder_record = holder_record});
    asio::co_spawn(
        co_await asio::this_coro::executor,
        [&]() -> asio::awaitable<void> {
          waiter_got_it = co_await waiter.async_try_lock_for(5s);
          if (waiter_got_it) co_await waiter.async_unlock();
        },
        asio::detached);
    for (int i = 0; i < 500 && queue_length() < 1; ++i) co_await sleep_for(2ms);
    EXPECT_EQ(queue_length(), 1) << "the second AsyncLock did not queue";
    co_await sleep_for(kLease * 3);  // past the record's first expiry (the lease's end + one ttl)
    EXPECT_FALSE(holder.lost());
    during = server.command({"GET", record_key}).str;
    co_await holder.async_unlock();
    for (int i = 0; i < 500 && !waiter_got_it; ++i) co_await sleep_for(2ms);
  });
  EXPECT_TRUE(finished);
  EXPECT_FALSE(during.empty()) << "no record names the holder's process after it held for 3 leases";
  EXPECT_TRUE(waiter_got_it);
}

INSTANTIATE_TEST_SUITE_P(HolderRecord, AsyncDirectHolder, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? std::string("On") : std::string("Off");
                         });

}  // namespace
}  // namespace lockon::test
