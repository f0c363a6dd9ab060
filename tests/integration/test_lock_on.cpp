// integration/test_lock_on.cpp — RedisLocker::lock_on against a real server:
// the key is held exactly while fn runs, exceptions release it, max_retry
// counts attempts exactly (seen on the server), the deadline is honoured
// within ±50 ms, a release wakes a waiter at once, lost leases are reported
// after fn returns, try_lock_on, the entity scope, fencing, decorate() with
// the default locker, and the Redlock backend.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "lockon/lockon.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class LockOnTest : public RedisTest {
 protected:
  // Every test gets its own key namespace.
  LockerPolicy policy(LockerPolicy p = {}) {
    p.key_prefix = prefix_;
    return p;
  }
  RedisLocker locker(LockerPolicy p = {}) { return RedisLocker(server().url(), policy(std::move(p))); }
  bool exists(const std::string& key) { return server().command({"EXISTS", key}).integer == 1; }
  // Someone else holds `key` (a plain SET, as any client could).
  void hold_from_outside(const std::string& key) {
    ASSERT_TRUE(server().command({"SET", key, "someone-else", "PX", "60000"}).is("OK"));
  }

  const std::string prefix_ = key("lock-on");
};

std::string card_and_amount(const std::string& card, int amount) { return card + ":" + std::to_string(amount); }

// issue 35 §11: lock_on holders could not be named in `status` / `list`.
TEST_F(LockOnTest, HolderLabelNamesTheHoldersRecord) {
  LockerPolicy named;
  named.holder_label = "payments-api";
  std::string record;
  const auto locked = locker(std::move(named)).lock_on<0>("bank::withdraw", [&](LockContext& context, const std::string&) {
    record = server().command({"GET", lock_companion_key(context.key(), "who")}).str;
  });
  locked("card-7");
  EXPECT_NE(record.find("|payments-api|"), std::string::npos) << record;
}

TEST_F(LockOnTest, HoldsTheKeyExactlyWhileTheFunctionRuns) {
  const auto locked = locker({.ttl = 5s}).lock_on<0>("bank::withdraw", [&](LockContext& context, const std::string& card, int amount) {
    EXPECT_EQ(context.key(), locker().key_for<0>("bank::withdraw", card, amount));
    const RawReply token = server().command({"GET", context.key()});
    EXPECT_FALSE(token.is_nil());
    EXPECT_TRUE(is_lock_token(token.str)) << token.str;  // 128 random bits in hex, not a guessable uuid1
    const long long pttl = server().command({"PTTL", context.key()}).integer;
    EXPECT_GT(pttl, 4000);
    EXPECT_LE(pttl, 5000);
    EXPECT_GT(context.remaining(), 4000ms);
    EXPECT_EQ(context.attempts(), 1);
    return card_and_amount(card, amount);
  });
  EXPECT_EQ(locked("card-1", 100), "card-1:100");
  EXPECT_FALSE(exists(locked.key_for("card-1", 100)));
  EXPECT_EQ(locked.key_for("card-1", 100).rfind(prefix_ + ":" + function_digest("bank::withdraw") + ":lock|", 0), 0u);
}

TEST_F(LockOnTest, AnExceptionReleasesTheLockAndPropagatesUnchanged) {
  const auto lk = locker();
  std::string seen_key;
  const auto failing = lk.lock_on<0>("failing", [&](LockContext& context, int) -> int {
    seen_key = context.key();
    throw std::out_of_range("insufficient funds");
  });
  try {
    (void)failing(7);
    FAIL() << "expected std::out_of_range";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "insufficient funds");
  }
  EXPECT_FALSE(seen_key.empty());
  EXPECT_FALSE(exists(seen_key));
  // Free again at once: the next call acquires on its first attempt.
  const auto start = Clock::now();
  EXPECT_EQ(lk.lock_on<0>("failing", [](LockContext& c, int x) { return c.attempts() * x; })(7), 7);
  EXPECT_LT(ms_since(start), 500);
}

TEST_F(LockOnTest, MaxRetryCountsAttemptsExactlyAsSeenByTheServer) {
  for (const int max_retry : {1, 3}) {
    int hook_attempts = 0;
    const auto lk = locker({.max_retry = max_retry, .retry_delay = 100ms, .timeout = 10s,
                            .on_attempt = [&](const AttemptEvent&) { ++hook_attempts; }});
    const auto locked = lk.lock_on<0>("busy", [](int) { ADD_FAILURE() << "must not run"; });
    hold_from_outside(locked.key_for(max_retry));
    const long long sets_before = commandstats_calls(server(), "set");
    const auto start = Clock::now();
    EXPECT_THROW(locked(max_retry), RetriesExhausted);
    const long long took = ms_since(start);
    // One SET NX (the fast path) for the whole call, plus the holder
    // record's SET NX in the same write: the later attempts continue from
    // the queue place the first one took (keep_queue_place).
    EXPECT_EQ(commandstats_calls(server(), "set") - sets_before, 2);
    EXPECT_EQ(hook_attempts, max_retry);
    EXPECT_GE(took, 100 * max_retry - 5);
    EXPECT_LT(took, 100 * max_retry + 300);
    EXPECT_EQ(server().command({"GET", locked.key_for(max_retry)}).str, "someone-else");  // untouched
  }
}

TEST_F(LockOnTest, DeadlineIsHonouredWithin50Ms) {
  struct Case {
    LockerPolicy policy;
    const char* what;
  };
  const std::vector<Case> cases = {
      {{.max_retry = 0, .retry_delay = 2s, .timeout = 300ms}, "one window longer than the deadline"},
      {{.max_retry = 10, .retry_delay = 120ms, .timeout = 300ms}, "the third window cut to the deadline"},
      {{.max_retry = 0, .retry_delay = 50ms, .retry_jitter = 40ms, .timeout = 300ms}, "jittered windows"},
  };
  for (const Case& c : cases) {
    const auto locked = locker(c.policy).lock_on<>("slow", [] { ADD_FAILURE() << "must not run"; });
    hold_from_outside(locked.key_for());
    const auto start = Clock::now();
    try {
      locked();
      ADD_FAILURE() << c.what << ": expected AcquireTimeout";
    } catch (const AcquireTimeout& e) {
      EXPECT_EQ(e.name(), locked.key_for());
    }
    const long long took = ms_since(start);
    EXPECT_GE(took, 300 - 1) << c.what;
    EXPECT_LE(took, 300 + 50) << c.what;
  }
}

TEST_F(LockOnTest, AReleaseWakesTheWaiterImmediately) {
  const auto lk = locker({.max_retry = 1, .retry_delay = 5s});
  std::atomic<long long> released_at_ns{0};
  std::atomic<bool> holding{false};
  const auto hold = lk.lock_on<0>("handoff", [&](int) {
    holding = true;
    std::this_thread::sleep_for(300ms);
    released_at_ns = Clock::now().time_since_epoch().count();  // just before the release
  });
  std::jthread holder([&] { hold(1); });
  ASSERT_TRUE(eventually(5s, [&] { return holding.load(); }));

  int attempts = 0;
  const auto wait = lk.lock_on<0>("handoff", [&](LockContext& context, int) {
    attempts = context.attempts();
    return Clock::now();
  });
  const Clock::time_point acquired_at = wait(1);
  holder.join();
  const auto handoff = acquired_at - Clock::time_point(Clock::duration(released_at_ns.load()));
  EXPECT_EQ(attempts, 1);  // woken inside the first attempt's 5 s window
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(handoff).count(), 50);
}

TEST_F(LockOnTest, LeaseLostMidCallIsReportedAfterTheFunctionReturns) {
  // The watchdog notices: the key is deleted from outside, the next renewal
  // (every ttl/3 = 100 ms) finds it gone.
  bool saw_loss_while_running = false;
  std::string lost_key;
  const auto locked = locker({.ttl = 300ms}).lock_on<0>("lease", [&](LockContext& context, int) {
    lost_key = context.key();
    server().command({"DEL", context.key()});
    saw_loss_while_running = eventually(3s, [&] { return context.stop_token().stop_requested(); });
    EXPECT_TRUE(context.lost());
    EXPECT_EQ(context.remaining(), 0ms);
    return 42;
  });
  try {
    (void)locked(1);
    FAIL() << "expected LockLost";
  } catch (const LockLost& e) {
    EXPECT_EQ(e.name(), lost_key);
    EXPECT_NE(std::string(e.what()).find("lease"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(saw_loss_while_running);
}

// The reproduction of a review finding (session 21): without renewal fn
// polled its stop token for 400 ms past a 200 ms lease and saw lost() true
// but stop_requested() false, and its stop_callback never ran. The lease's
// end now requests stop within ~100 ms of it.
TEST_F(LockOnTest, WithoutRenewalTheLeaseEndRequestsStopWhileTheFunctionRuns) {
  std::atomic<bool> stop_callback_ran{false};
  bool stop_seen = false;
  long long seen_after_ms = -1;
  const auto locked = locker({.ttl = 200ms, .auto_renew = false}).lock_on<0>("short", [&](LockContext& context, int) {
    const auto start = Clock::now();
    const std::stop_callback on_stop(context.stop_token(), [&] { stop_callback_ran = true; });
    while (ms_since(start) < 400 && !context.stop_token().stop_requested()) std::this_thread::sleep_for(2ms);
    stop_seen = context.stop_token().stop_requested();
    seen_after_ms = ms_since(start);
    EXPECT_TRUE(context.lost());
    return 0;
  });
  EXPECT_THROW((void)locked(1), LockLost);
  EXPECT_TRUE(stop_seen);
  EXPECT_TRUE(stop_callback_ran.load());
  EXPECT_LE(seen_after_ms, 300);
}

TEST_F(LockOnTest, LeaseTakenByAnotherOwnerIsReportedAndTheirLockIsLeftAlone) {
  // Not yet noticed by the watchdog: the compare-and-delete release finds
  // another token and reports the loss.
  std::string taken_key;
  const auto locked = locker().lock_on<0>("stolen", [&](LockContext& context, int) {
    taken_key = context.key();
    server().command({"SET", context.key(), "usurper", "PX", "60000"});
  });
  EXPECT_THROW(locked(1), LockLost);
  EXPECT_EQ(server().command({"GET", taken_key}).str, "usurper");

  // The try variant reports it too.
  const auto try_locked = locker().try_lock_on<0>("stolen-try", [&](LockContext& context, int) {
    server().command({"DEL", context.key()});
    return 1;
  });
  EXPECT_THROW((void)try_locked(1), LockLost);
}

TEST_F(LockOnTest, TryVariantReturnsEmptyWhenBusy) {
  const auto lk = locker({.max_retry = 1, .retry_delay = 0ms});
  int runs = 0;
  const auto try_value = lk.try_lock_on<0>("try", [&](const std::string& id) { ++runs; return id + "!"; });
  const auto try_void = lk.try_lock_on<0>("try", [&](const std::string&) { ++runs; });
  hold_from_outside(try_value.key_for("a"));
  const auto start = Clock::now();
  EXPECT_EQ(try_value("a"), std::nullopt);
  EXPECT_FALSE(try_void("a"));
  EXPECT_LT(ms_since(start), 50);
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(try_value("b"), "b!");
  server().command({"DEL", try_value.key_for("a")});
  EXPECT_TRUE(try_void("a"));
  EXPECT_EQ(runs, 2);
}

TEST_F(LockOnTest, EntityScopeSharesOneLockAcrossFunctions) {
  const auto lk = locker({.max_retry = 1, .retry_delay = 0ms});
  const LockOnOptions entity{.scope = KeyScope::entity};
  std::atomic<bool> inside{false};
  std::atomic<bool> leave{false};
  const auto withdraw = lk.lock_on<0>("bank::withdraw", [&](const std::string&, int) {
    inside = true;
    eventually(10s, [&] { return leave.load(); });
  }, entity);
  const auto deposit = lk.try_lock_on<0>("bank::deposit", [](const std::string&, int amount) { return amount; }, entity);
  const auto deposit_own = lk.try_lock_on<0>("bank::deposit", [](const std::string&, int amount) { return amount; });

  std::jthread worker([&] { withdraw("card-1", 10); });
  ASSERT_TRUE(eventually(5s, [&] { return inside.load(); }));
  EXPECT_EQ(deposit("card-1", 5), std::nullopt);  // same card, another function: excluded
  EXPECT_EQ(deposit("card-2", 5), 5);             // another card: free
  EXPECT_EQ(deposit_own("card-1", 6), 6);         // function scope: a different lock
  leave = true;
  worker.join();
  EXPECT_EQ(deposit("card-1", 7), 7);
  EXPECT_EQ(withdraw.key_for("card-1", 0), prefix_ + ":entity:lock|" + md5_hex(encode_args("card-1")));
}

TEST_F(LockOnTest, FencesComeFromTheContextAndIncrease) {
  const auto locked = locker({.fencing = true}).lock_on<0>("fenced", [](LockContext& context, int) { return context.fence(); });
  const std::uint64_t first = locked(1);
  const std::uint64_t second = locked(1);
  EXPECT_GT(first, 0u);
  EXPECT_GT(second, first);
  const auto unfenced = locker().lock_on<0>("unfenced", [](LockContext& context, int) { return context.fence(); });
  EXPECT_EQ(unfenced(1), 0u);
}

struct Account {
  std::string id;
  long long balance = 0;
  long long deposit(long long amount) { return balance += amount; }
  long long& balance_ref() { return balance; }
};

}  // namespace
}  // namespace lockon::test

template <>
struct lockon::ArgEncoder<lockon::test::Account> {
  static void encode(lockon::Encoder& enc, const lockon::test::Account& account) { enc.add(account.id); }
};

namespace lockon::test {
namespace {

TEST_F(LockOnTest, ResultsAndCallableKindsAgainstARealServer) {
  const auto lk = locker();
  Account account{"acct-1", 10};
  // Member functions: the object is position 0.
  EXPECT_EQ(lk.lock_on<0>("acct::deposit", &Account::deposit)(account, 5), 15);
  long long& ref = lk.lock_on<0>("acct::balance", &Account::balance_ref)(account);
  EXPECT_EQ(&ref, &account.balance);
  // Move-only in and out.
  const auto boxed = lk.lock_on<1>("box", [](std::unique_ptr<int> p, int key) { return std::make_unique<int>(*p + key); });
  EXPECT_EQ(*boxed(std::make_unique<int>(40), 2), 42);
  // std::function and void.
  int sink = 0;
  const std::function<void(int)> store = [&sink](int v) { sink = v; };
  lk.lock_on<0>("store", store)(9);
  EXPECT_EQ(sink, 9);
}

TEST_F(LockOnTest, DecoratedFunctionsUseTheDefaultLockerOrAnExplicitOne) {
  static constexpr auto locked = decorate<"test::decorated", 0>([](LockContext& context, int x) {
    return context.key() + "#" + std::to_string(x);
  });
  set_default_locker(locker());
  const std::string via_default = locked(3);
  EXPECT_EQ(via_default, locked.key_for(3) + "#3");
  EXPECT_EQ(via_default.rfind(prefix_ + ":" + function_digest("test::decorated") + ":lock|", 0), 0u);
  const RedisLocker other(server().url(), {.key_prefix = prefix_ + "-other"});
  EXPECT_EQ(locked.with(other)(4), other.key_for<0>("test::decorated", 4) + "#4");
  reset_default_locker();
}

// ------------------------------------------------------------ Redlock

class LockOnRedlockTest : public ::testing::Test {
 protected:
  void SetUp() override { servers_ = start_servers(3); }
  std::vector<std::string> urls() const {
    std::vector<std::string> out;
    for (const auto& s : servers_) out.push_back(s->url());
    return out;
  }
  int holders(const std::string& key) const {
    int n = 0;
    for (const auto& s : servers_) n += static_cast<int>(s->command({"EXISTS", key}).integer);
    return n;
  }
  std::vector<std::unique_ptr<RedisServer>> servers_;
};

TEST_F(LockOnRedlockTest, RedlockBackendWorksThroughRedisLocker) {
  const RedisLocker locker = RedisLocker::redlock(urls(), {.max_retry = 0, .retry_delay = 2s, .timeout = 20s,
                                                           .ttl = 10s, .fencing = true});
  const Client data(servers_[0]->url());
  std::atomic<int> max_holders{0};
  const auto bump = locker.lock_on<0>("redlock::bump", [&](LockContext& context, const std::string& counter) {
    max_holders = std::max(max_holders.load(), holders(context.key()));
    EXPECT_GT(context.fence(), 0u);
    EXPECT_GT(context.remaining(), 5s);  // Redlock: the local validity
    const Reply value = data.command({"GET", counter});
    const long long next = (value.is_nil() ? 0 : std::stoll(value.as_string())) + 1;
    data.command({"SET", counter, std::to_string(next)});
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) bump("redlock-counter");
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(data.command({"GET", "redlock-counter"}).as_string(), "40");
  EXPECT_GE(max_holders.load(), 2);  // a majority held it while the function ran
  // A release returns once a majority confirmed; the third node's may run a
  // moment later (still far inside the 10 s TTL).
  EXPECT_TRUE(eventually(500ms, [&] { return holders(bump.key_for("redlock-counter")) == 0; }));

  // Busy on a majority: the policy's outcome, not an infrastructure error.
  const std::string key = bump.key_for("busy");
  for (const auto& s : servers_) s->command({"SET", key, "someone-else", "PX", "60000"});
  const auto quick = RedisLocker::redlock(urls(), {.max_retry = 2, .retry_delay = 50ms});
  EXPECT_THROW(quick.lock_on<0>("redlock::bump", [](const std::string&) {})("busy"), RetriesExhausted);
}

}  // namespace
}  // namespace lockon::test
