// integration/test_async_holder.cpp — AsyncLock writes the same holder
// records as the blocking Lock (protocol/holder_record.hpp, `lockon status`): on the
// fast path (plain and fenced), as a queued waiter and through a hand-over;
// the record follows renewal and leaves with the release. Attacks: a losing
// attempt never overwrites the holder's record, a key of the wrong type
// leaves no record behind, holder_record = false writes none.
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "integration/async_support.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/async.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

class AsyncHolderRecords : public RedisTest {
 protected:
  std::string who(const std::string& name) { return server().command({"GET", detail::companion_key(name, "who")}).str; }
  long long who_pttl(const std::string& name) {
    return server().command({"PTTL", detail::companion_key(name, "who")}).integer;
  }
  bool has_who(const std::string& name) {
    return server().command({"EXISTS", detail::companion_key(name, "who")}).integer == 1;
  }
  // "<token 8>|<host>|<pid>|<start>|<label>|<since>": this process, `label`.
  static bool names_us(const std::string& record, const std::string& label) {
    return record.find("|" + std::to_string(getpid()) + "|") != std::string::npos &&
           record.find("|" + label + "|") != std::string::npos;
  }
  asio::io_context io;
};

// A losing attempt beside a holder without a record: its record's SET NX
// found the who key empty, and the record must not stay there naming it.
TEST_F(AsyncHolderRecords, ALosingAttemptLeavesNoRecordBesideAHolderWithoutOne) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("beside");
  Lock holder(Client(server().url()), name, {.holder_record = false});
  ASSERT_TRUE(holder.try_lock());
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    for (const bool fencing : {false, true}) {
      AsyncLock loser(client, name, LockOptions{.fencing = fencing, .holder_label = "loser"});
      const bool got = co_await loser.async_try_lock();
      EXPECT_FALSE(got);
      EXPECT_FALSE(has_who(name)) << (fencing ? "fenced: " : "") << "the loser's record stayed";
    }
  }));
}

TEST_F(AsyncHolderRecords, FastPathWritesTheRecordWithTheLeaseAndReleaseDeletesIt) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string plain = key("plain");
  const std::string fenced = key("fenced");
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock lock(client, plain, LockOptions{.ttl = 20s, .holder_label = "async-plain"});
    co_await lock.async_lock();
    const std::string record = who(plain);
    EXPECT_TRUE(names_us(record, "async-plain")) << record;
    const std::string token = server().command({"GET", plain}).str;
    EXPECT_EQ(record.substr(0, 8), token.substr(0, 8)) << "the record carries the token's first 8 characters only";
    EXPECT_EQ(record.find(token), std::string::npos);
    EXPECT_GT(who_pttl(plain), 15'000) << "the record expires with the lease";
    co_await lock.async_unlock();
    EXPECT_FALSE(has_who(plain)) << "the release deletes the record";

    AsyncLock with_fence(client, fenced, LockOptions{.ttl = 20s, .fencing = true, .holder_label = "async-fenced"});
    co_await with_fence.async_lock();
    EXPECT_GT(with_fence.fence(), 0u);
    EXPECT_TRUE(names_us(who(fenced), "async-fenced")) << who(fenced);
    co_await with_fence.async_unlock();
    EXPECT_FALSE(has_who(fenced));
  }));
}

TEST_F(AsyncHolderRecords, ALosingAttemptNeverOverwritesTheHoldersRecord) {
  const std::string name = key("lose");
  Lock holder(Client(server().url()), name, {.ttl = 20s, .holder_label = "blocking-holder"});
  ASSERT_TRUE(holder.try_lock());
  const std::string before = who(name);
  ASSERT_TRUE(names_us(before, "blocking-holder")) << before;
  AsyncClient client(io.get_executor(), server().url());
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock plain(client, name, LockOptions{.ttl = 20s, .holder_label = "loser"});
    EXPECT_FALSE(co_await plain.async_try_lock());
    AsyncLock fenced(client, name, LockOptions{.ttl = 20s, .fencing = true, .holder_label = "loser"});
    EXPECT_FALSE(co_await fenced.async_try_lock_for(150ms));  // fast path, then a queued wait that gives up
  }));
  EXPECT_EQ(who(name), before);
  EXPECT_EQ(server().command({"HLEN", detail::companion_key(name, "qwho")}).integer, 0)
      << "a waiter that gave up leaves no waiter record";
  holder.unlock();
  EXPECT_FALSE(has_who(name));
}

TEST_F(AsyncHolderRecords, AQueuedAsyncWaiterIsListedAndTheHandOverMakesItTheHolder) {
  const std::string name = key("handover");
  Lock holder(Client(server().url()), name, {.ttl = 20s, .holder_label = "blocking-holder"});
  ASSERT_TRUE(holder.try_lock());
  AsyncClient client(io.get_executor(), server().url());
  std::atomic<bool> got{false};
  std::string record_while_held;
  std::jthread releaser([&] {
    // Queued: its waiter record is in qwho, beside the queue entry.
    for (int i = 0; i < 500 && server().command({"HLEN", detail::companion_key(name, "qwho")}).integer < 1; ++i)
      std::this_thread::sleep_for(10ms);
    holder.unlock();  // hands over to the async waiter
  });
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock waiter(client, name, LockOptions{.ttl = 20s, .holder_label = "async-waiter"});
    got = co_await waiter.async_try_lock_for(10s);
    record_while_held = who(name);
    if (got) co_await waiter.async_unlock();
  }));
  releaser.join();
  EXPECT_TRUE(got.load());
  EXPECT_TRUE(names_us(record_while_held, "async-waiter")) << record_while_held;
  EXPECT_FALSE(has_who(name));
  EXPECT_EQ(server().command({"EXISTS", detail::companion_key(name, "qwho")}).integer, 0);
}

TEST_F(AsyncHolderRecords, RenewalKeepsTheRecordAliveWithTheLease) {
  const std::string name = key("renew");
  AsyncClient client(io.get_executor(), server().url());
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock lock(client, name, LockOptions{.ttl = 600ms, .holder_label = "renewed"});
    co_await lock.async_lock();
    asio::steady_timer timer(io, 1500ms);  // 2.5 leases
    co_await timer.async_wait(asio::use_awaitable);
    EXPECT_FALSE(lock.lost());
    EXPECT_TRUE(names_us(who(name), "renewed")) << "the record outlived its first lease: renewed with it";
    EXPECT_GT(who_pttl(name), 0);
    co_await lock.async_extend(5s, true, asio::use_awaitable);
    EXPECT_GT(who_pttl(name), 3'000) << "an extension extends the record too";
    co_await lock.async_unlock();
  }));
  EXPECT_FALSE(has_who(name));
}

TEST_F(AsyncHolderRecords, AWrongTypeKeyLeavesNoRecordAndNoRecordWhenTurnedOff) {
  const std::string wrong = key("wrongtype");
  server().command({"LPUSH", wrong, "x"});
  const std::string off = key("off");
  AsyncClient client(io.get_executor(), server().url());
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock lock(client, wrong, LockOptions{.ttl = 20s});
    bool threw = false;
    try {
      co_await lock.async_try_lock();
    } catch (const WrongTypeError&) {
      threw = true;
    }
    EXPECT_TRUE(threw);
    EXPECT_FALSE(has_who(wrong)) << "the failed attempt's record was deleted";
    EXPECT_EQ(server().command({"LLEN", wrong}).integer, 1) << "the user's key is untouched";

    AsyncLock quiet(client, off, LockOptions{.ttl = 20s, .holder_record = false});
    co_await quiet.async_lock();
    EXPECT_FALSE(has_who(off));
    co_await quiet.async_unlock();
  }));
}

}  // namespace
}  // namespace lockon::test
