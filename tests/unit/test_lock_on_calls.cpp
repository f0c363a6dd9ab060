// The lock_on call machinery without a server (an in-process fake backend):
// signatures and results, argument forwarding, exceptions, LockContext
// injection, the attempt loop (max_retry counts attempts exactly, the
// deadline is never overslept), try_lock_on, and lease loss.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../support/steady_time.hpp"
#include "lock_on_fake_backend.hpp"
#include "lockon/lockon.hpp"

namespace {

using namespace std::literals;
using Clock = std::chrono::steady_clock;
using lockon::test::FakeBackend;
using lockon::test::FakeLock;
using lockon::test::fake_locker;
using lockon::test::ms_since;

// Counts copies and moves; encodable, so it can be a lock argument.
struct Tracked {
  int id = 0;
  static inline int copies = 0;
  static inline int moves = 0;
  explicit Tracked(int i) : id(i) {}
  Tracked(const Tracked& other) : id(other.id) { ++copies; }
  Tracked(Tracked&& other) noexcept : id(other.id) { ++moves; }
  Tracked& operator=(const Tracked&) = delete;
  Tracked& operator=(Tracked&&) = delete;
  ~Tracked() = default;
};

}  // namespace

template <>
struct lockon::ArgEncoder<Tracked> {
  static void encode(lockon::Encoder& enc, const Tracked& t) { enc.add(t.id); }
};

namespace {

struct BalanceAccount {
  int balance = 100;
  int withdraw(int amount) { return balance -= amount; }
  int peek(int extra) const { return balance + extra; }
  std::string where(lockon::LockContext& context, int) const { return context.key(); }
  int& balance_ref() { return balance; }
};

int add(int a, int b) { return a + b; }
void store(int& target, int value) { target = value; }
int& pick(std::vector<int>& values, std::size_t index) { return values.at(index); }
std::unique_ptr<int> pass_through(std::unique_ptr<int> p) { return p; }
int consume(std::unique_ptr<int>&& p, int key) { return *p + key; }
std::string&& forward_string(std::string&& s) { return std::move(s); }
int by_tracked_value(Tracked t) { return t.id; }
int by_tracked_ref(const Tracked& t) { return t.id; }

// ------------------------------------------------------------ signatures

TEST(LockOnCalls, CallOperatorHasTheFunctionsSignature) {
  FakeBackend backend;
  const auto locker = fake_locker(backend);
  const auto locked_add = locker.lock_on<0>("add", &add);
  static_assert(std::is_same_v<decltype(locked_add(1, 2)), int>);
  static_assert(std::is_invocable_r_v<int, decltype(locked_add), long, short>);  // converts like add
  static_assert(!std::is_invocable_v<decltype(locked_add), int>);
  static_assert(std::is_same_v<decltype(locked_add)::result_type, int>);
  EXPECT_EQ(locked_add(40, 2), 42);

  const auto locked_pick = locker.lock_on<1>("pick", &pick);
  static_assert(std::is_same_v<decltype(locked_pick(std::declval<std::vector<int>&>(), 0)), int&>);
  const auto locked_forward = locker.lock_on<0>("forward", &forward_string);
  static_assert(std::is_same_v<decltype(locked_forward(std::string())), std::string&&>);

  const auto try_add = locker.try_lock_on<0>("add", &add);
  static_assert(std::is_same_v<decltype(try_add(1, 2)), std::optional<int>>);
  static_assert(std::is_same_v<decltype(locker.try_lock_on<0>("s", &store)(std::declval<int&>(), 1)), bool>);
  static_assert(std::is_same_v<decltype(locker.try_lock_on<1>("p", &pick)(std::declval<std::vector<int>&>(), 0)),
                               std::optional<std::reference_wrapper<int>>>);
  static_assert(std::is_same_v<decltype(locker.try_lock_on<0>("f", &forward_string)(std::string())),
                               std::optional<std::string>>);
}

TEST(LockOnCalls, VoidReferenceAndMoveOnlyResults) {
  FakeBackend backend;
  const auto locker = fake_locker(backend);

  int target = 0;
  locker.lock_on<1>("store", &store)(target, 7);
  EXPECT_EQ(target, 7);

  std::vector<int> values{1, 2, 3};
  int& element = locker.lock_on<1>("pick", &pick)(values, 1);
  EXPECT_EQ(&element, &values[1]);  // the very same object, not a copy
  const auto tried = locker.try_lock_on<1>("pick", &pick)(values, 2);
  ASSERT_TRUE(tried.has_value());
  EXPECT_EQ(&tried->get(), &values[2]);

  std::unique_ptr<int> p = locker.lock_on<>("pass", &pass_through)(std::make_unique<int>(5));
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, 5);
  std::optional<std::unique_ptr<int>> q = locker.try_lock_on<>("pass", &pass_through)(std::make_unique<int>(6));
  ASSERT_TRUE(q && *q);
  EXPECT_EQ(**q, 6);

  std::string s = "moved";
  std::string&& r = locker.lock_on<0>("forward", &forward_string)(std::move(s));
  EXPECT_EQ(&r, &s);

  EXPECT_TRUE(locker.try_lock_on<1>("store", &store)(target, 9));
  EXPECT_EQ(target, 9);
}

TEST(LockOnCalls, ArgumentsAreEncodedByReferenceAndForwardedNotCopied) {
  FakeBackend backend;
  const auto locker = fake_locker(backend);
  Tracked::copies = Tracked::moves = 0;
  EXPECT_EQ(locker.lock_on<0>("t", &by_tracked_ref)(Tracked(3)), 3);
  EXPECT_EQ(Tracked::copies, 0);
  EXPECT_EQ(Tracked::moves, 0);

  // By value: the wrapper's own parameter is moved into fn's (one move).
  Tracked::copies = Tracked::moves = 0;
  EXPECT_EQ(locker.lock_on<0>("t", &by_tracked_value)(Tracked(4)), 4);
  EXPECT_EQ(Tracked::copies, 0);
  EXPECT_EQ(Tracked::moves, 1);

  // A generic lambda forwards exactly what the caller passed.
  Tracked::copies = Tracked::moves = 0;
  const Tracked lvalue(5);
  EXPECT_EQ(locker.lock_on<0>("t", [](const auto& t) { return t.id; })(lvalue), 5);
  EXPECT_EQ(Tracked::copies + Tracked::moves, 0);

  // Move-only arguments pass through; the key is derived before fn moves them.
  const auto locked = locker.lock_on<1>("consume", &consume);
  EXPECT_EQ(locked(std::make_unique<int>(40), 2), 42);
  EXPECT_EQ(backend.keys.back(), locked.key_for(nullptr, 2));
}

TEST(LockOnCalls, MemberFunctionsLambdasAndStdFunction) {
  FakeBackend backend;
  const auto locker = fake_locker(backend);
  BalanceAccount account;

  EXPECT_EQ(locker.lock_on<1>("acct::withdraw", &BalanceAccount::withdraw)(account, 30), 70);
  EXPECT_EQ(account.balance, 70);
  const BalanceAccount& const_account = account;
  EXPECT_EQ(locker.lock_on<1>("acct::peek", &BalanceAccount::peek)(const_account, 1), 71);
  int& ref = locker.lock_on<>("acct::ref", &BalanceAccount::balance_ref)(account);
  EXPECT_EQ(&ref, &account.balance);

  int captured = 0;
  const auto lambda = locker.lock_on<0>("lambda", [&captured](int x) { captured += x; return captured; });
  EXPECT_EQ(lambda(5), 5);
  EXPECT_EQ(lambda(5), 10);

  const std::function<std::string(const std::string&)> upper = [](const std::string& s) { return s + "!"; };
  const auto locked_function = locker.lock_on<0>("std::function", upper);
  static_assert(std::is_same_v<decltype(locked_function("x")), std::string>);
  EXPECT_EQ(locked_function("hi"), "hi!");

  const auto generic = locker.lock_on<0, 1>("generic", [](auto a, auto b) { return a * b; });
  EXPECT_EQ(generic(6, 7), 42);
  EXPECT_DOUBLE_EQ(generic(1.5, 2.0), 3.0);
  EXPECT_EQ(backend.keys.back(), generic.key_for(1.5, 2.0));
}

// ------------------------------------------------------------ LockContext

TEST(LockOnCalls, ContextIsInjectedAndNotPartOfTheArguments) {
  FakeBackend backend;
  const auto locker = fake_locker(backend, {.fencing = true});

  const auto locked = locker.lock_on<0>("ctx", [](lockon::LockContext& context, const std::string&) {
    EXPECT_EQ(context.function_name(), "ctx");
    EXPECT_EQ(context.attempts(), 1);
    EXPECT_FALSE(context.lost());
    EXPECT_FALSE(context.stop_token().stop_requested());
    EXPECT_EQ(context.remaining(), 30s);  // the fake answers PTTL with the ttl
    EXPECT_NO_THROW(context.throw_if_lost());
    return std::make_pair(context.key(), context.fence()) ;
  });
  const auto [key, fence] = locked("card-1");
  EXPECT_EQ(key, locked.key_for("card-1"));
  EXPECT_EQ(fence, 1u);
  EXPECT_EQ(locked("card-1").second, 2u);  // fences increase per acquisition

  const auto by_const_ref = locker.lock_on<0>("ctx2", [](const lockon::LockContext& c, int) { return c.fence(); });
  EXPECT_EQ(by_const_ref(1), 3u);

  BalanceAccount account;
  const auto member = locker.lock_on<1>("acct::where", &BalanceAccount::where);
  EXPECT_EQ(member(account, 9), member.key_for(account, 9));

  const auto generic = locker.lock_on<0>("gctx", [](lockon::LockContext& c, auto id) { return c.key() + ":" + id; });
  EXPECT_EQ(generic("a"s), generic.key_for("a"s) + ":a");
}

// ------------------------------------------------------------ exceptions

struct Boom : std::runtime_error {
  using std::runtime_error::runtime_error;
  int code = 7;
};

TEST(LockOnCalls, ExceptionsPropagateUnchangedAndReleaseTheLock) {
  FakeBackend backend;
  const auto locker = fake_locker(backend);
  const auto locked = locker.lock_on<0>("throws", [](int) -> int { throw Boom("boom"); });
  try {
    locked(1);
    FAIL() << "expected Boom";
  } catch (const Boom& e) {
    EXPECT_STREQ(e.what(), "boom");
    EXPECT_EQ(e.code, 7);
  }
  EXPECT_FALSE(backend.is_held(locked.key_for(1)));
  // Not even a lockon error slips through as another type.
  const auto nested = locker.lock_on<0>("nested", [](int) { throw lockon::AcquireTimeout("inner", "k"); });
  EXPECT_THROW(nested(1), lockon::AcquireTimeout);
  const auto try_nested = locker.try_lock_on<0>("nested", [](int) { throw lockon::AcquireTimeout("inner", "k"); });
  EXPECT_THROW(try_nested(1), lockon::AcquireTimeout);  // fn's exception, not "busy"
  EXPECT_FALSE(backend.is_held(nested.key_for(1)));
}

// ------------------------------------------------------------ attempts & deadline

TEST(LockOnCalls, MaxRetryCountsAttemptsExactly) {
  for (const int max_retry : {1, 2, 4}) {
    FakeBackend backend;
    std::vector<lockon::AttemptEvent> events;
    const auto locker = fake_locker(backend, {.max_retry = max_retry, .retry_delay = 10ms, .timeout = 0ms,
                                              .on_attempt = [&](const lockon::AttemptEvent& e) { events.push_back(e); }});
    const auto locked = locker.lock_on<0>("busy", [](int) { ADD_FAILURE() << "must not run"; });
    backend.set_held(locked.key_for(1), true);
    const auto start = Clock::now();
    try {
      locked(1);
      FAIL() << "expected RetriesExhausted";
    } catch (const lockon::RetriesExhausted& e) {
      EXPECT_EQ(e.name(), locked.key_for(1));
      const std::string expected = "lock '" + locked.key_for(1) + "' still busy after " + std::to_string(max_retry) +
                                   (max_retry == 1 ? " attempt over " : " attempts over ");
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("lock_on 'busy'"), std::string::npos) << e.what();
    }
    const long long took = ms_since(start);
    EXPECT_EQ(backend.attempts(), max_retry);
    ASSERT_EQ(events.size(), static_cast<std::size_t>(max_retry));
    for (int i = 0; i < max_retry; ++i) {
      EXPECT_EQ(events[static_cast<std::size_t>(i)].attempt, i + 1);
      EXPECT_FALSE(events[static_cast<std::size_t>(i)].acquired);
      EXPECT_EQ(events[static_cast<std::size_t>(i)].function_name, "busy");
    }
    EXPECT_GE(took, 10 * max_retry - 1);  // each attempt waited its window
    EXPECT_LT(took, 10 * max_retry + 100);
  }
}

TEST(LockOnCalls, AThrowingAttemptHookReleasesWhatTheAttemptTook) {
  FakeBackend backend;
  const auto locker = fake_locker(backend, {.on_attempt = [](const lockon::AttemptEvent& e) {
                                              if (e.acquired) throw std::runtime_error("hook failed");
                                            }});
  int runs = 0;
  const auto locked = locker.lock_on<0>("hook", [&](int) { ++runs; });
  EXPECT_THROW(locked(1), std::runtime_error);
  EXPECT_EQ(runs, 0);
  EXPECT_FALSE(backend.is_held(locked.key_for(1)));
}

TEST(LockOnCalls, ZeroRetryDelayMeansImmediateTries) {
  FakeBackend backend;
  const auto locker = fake_locker(backend, {.max_retry = 5, .retry_delay = 0ms});
  const auto locked = locker.lock_on<>("busy", [] {});
  backend.set_held(locked.key_for(), true);
  const auto start = Clock::now();
  EXPECT_THROW(locked(), lockon::RetriesExhausted);
  EXPECT_LT(ms_since(start), 50);
  EXPECT_EQ(backend.attempts(), 5);
}

TEST(LockOnCalls, DeadlineIsHonouredAndNeverOverslept) {
  FakeBackend backend;
  // 120 + 120 + (cut to 60): the third window must stop at the deadline.
  const auto locker = fake_locker(backend, {.max_retry = 10, .retry_delay = 120ms, .timeout = 300ms});
  const auto locked = locker.lock_on<>("busy", [] {});
  backend.set_held(locked.key_for(), true);
  const auto start = Clock::now();
  try {
    locked();
    FAIL() << "expected AcquireTimeout";
  } catch (const lockon::AcquireTimeout& e) {
    EXPECT_NE(std::string(e.what()).find("acquire lock timeout"), std::string::npos) << e.what();
  }
  const long long took = ms_since(start);
  EXPECT_GE(took, 299);
  EXPECT_LE(took, 350);
  EXPECT_EQ(backend.attempts(), 3);
}

TEST(LockOnCalls, AReleaseEndsTheWaitWithinTheSameAttempt) {
  FakeBackend backend;
  std::vector<lockon::AttemptEvent> events;
  const auto locker = fake_locker(backend, {.max_retry = 1, .retry_delay = 5s,
                                            .on_attempt = [&](const lockon::AttemptEvent& e) { events.push_back(e); }});
  const auto locked = locker.lock_on<>("handoff", [] { return 1; });
  backend.set_held(locked.key_for(), true);
  std::thread releaser([&] {
    std::this_thread::sleep_for(100ms);
    backend.set_held(locked.key_for(), false);
  });
  const auto start = Clock::now();
  EXPECT_EQ(locked(), 1);
  releaser.join();
  EXPECT_LT(ms_since(start), 1000);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].acquired);
}

TEST(LockOnCalls, TryVariantReturnsEmptyWhenBusyWithoutRunning) {
  FakeBackend backend;
  const auto locker = fake_locker(backend, {.max_retry = 2, .retry_delay = 5ms});
  int runs = 0;
  const auto try_value = locker.try_lock_on<0>("busy", [&](int x) { ++runs; return x; });
  const auto try_void = locker.try_lock_on<0>("busy", [&](int) { ++runs; });
  backend.set_held(try_value.key_for(1), true);
  EXPECT_EQ(try_value(1), std::nullopt);
  EXPECT_FALSE(try_void(1));
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(try_value(2), 2);  // another key is free
  EXPECT_TRUE(try_void(2));
  EXPECT_EQ(runs, 2);
  // A per-function policy: one immediate try.
  const auto once = locker.try_lock_on<0>("busy", [](int x) { return x; },
                                          {.policy = lockon::LockerPolicy{.max_retry = 1, .retry_delay = 0ms}});
  const int before = backend.attempts();
  EXPECT_EQ(once(1), std::nullopt);
  EXPECT_EQ(backend.attempts(), before + 1);
}

TEST(LockOnCalls, InfrastructureErrorsAreNeitherBusyNorEmpty) {
  // Nothing listens on port 1: the connection is refused at once.
  const lockon::RedisLocker locker("redis://127.0.0.1:1?connect_timeout=200ms");
  int runs = 0;
  const auto locked = locker.lock_on<0>("down", [&](int) { ++runs; });
  const auto try_locked = locker.try_lock_on<0>("down", [&](int) { ++runs; });
  EXPECT_THROW(locked(1), lockon::IoError);
  EXPECT_THROW(try_locked(1), lockon::IoError);  // not "busy": empty would hide an outage
  try {
    locked(1);
  } catch (const lockon::LockError& e) {
    ADD_FAILURE() << "an outage must not look like a busy lock: " << e.what();
  } catch (const lockon::IoError&) {
  }
  EXPECT_EQ(runs, 0);
}

// ------------------------------------------------------------ lease loss

TEST(LockOnCalls, LostLeaseIsReportedAfterTheFunctionReturns) {
  FakeBackend backend;
  const auto locker = fake_locker(backend);
  bool finished = false;
  const auto locked = locker.lock_on<0>("lose", [&](lockon::LockContext& context, int) {
    static_cast<FakeLock&>(context.lock()).lose();
    EXPECT_TRUE(context.lost());
    EXPECT_TRUE(context.stop_token().stop_requested());
    EXPECT_EQ(context.remaining(), 0ms);
    EXPECT_THROW(context.throw_if_lost(), lockon::LockLost);
    finished = true;
    return 5;
  });
  try {
    (void)locked(1);
    FAIL() << "expected LockLost";
  } catch (const lockon::LockLost& e) {
    EXPECT_EQ(e.name(), locked.key_for(1));
    EXPECT_NE(std::string(e.what()).find("lose"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(finished);
  EXPECT_FALSE(backend.is_held(locked.key_for(1)));

  // The try variant reports it too (fn ran: "empty" would be a lie).
  const auto try_locked = locker.try_lock_on<0>("lose", [](lockon::LockContext& context, int) {
    static_cast<FakeLock&>(context.lock()).lose();
  });
  EXPECT_THROW(try_locked(1), lockon::LockLost);

  // fn's own exception wins over the loss.
  const auto throwing = locker.lock_on<0>("lose", [](lockon::LockContext& context, int) {
    static_cast<FakeLock&>(context.lock()).lose();
    throw Boom("fn failed");
  });
  EXPECT_THROW(throwing(1), Boom);
}

// ------------------------------------------------------------ lock reuse

TEST(LockOnCalls, LockObjectsAreReusedForTheSameKey) {
  FakeBackend backend;
  const auto locker = fake_locker(backend);
  const auto locked = locker.lock_on<0>("reuse", [](lockon::LockContext& context, int) { return context.key(); });
  const std::string key1 = locked(1);
  EXPECT_EQ(locked(1), key1);
  EXPECT_EQ(locked(1), key1);
  EXPECT_EQ(backend.keys.size(), 1u);  // one lock object served the three calls
  EXPECT_NE(locked(2), key1);
  EXPECT_EQ(backend.keys.size(), 2u);
  // Same arguments under another identity, scope or policy: another key, another lock.
  EXPECT_NE(locker.lock_on<0>("other", [](lockon::LockContext& c, int) { return c.key(); })(1), key1);
  EXPECT_NE(locker.lock_on<0>("reuse", [](lockon::LockContext& c, int) { return c.key(); },
                              {.scope = lockon::KeyScope::entity})(1),
            key1);
  EXPECT_NE(locker.lock_on<0>("reuse", [](lockon::LockContext& c, int) { return c.key(); },
                              {.policy = lockon::LockerPolicy{.key_prefix = "p2"}})(1),
            key1);
  EXPECT_EQ(backend.keys.size(), 5u);
}

TEST(LockOnCalls, AReusedLockStartsClean) {
  FakeBackend backend;
  const auto locker = fake_locker(backend, {.fencing = true});
  bool lose = true;
  const auto locked = locker.lock_on<0>("clean", [&](lockon::LockContext& context, int) {
    EXPECT_FALSE(context.lost());  // a loss of the previous call does not leak into this one
    if (lose) static_cast<FakeLock&>(context.lock()).lose();
    return context.fence();
  });
  EXPECT_THROW((void)locked(1), lockon::LockLost);
  lose = false;
  EXPECT_EQ(locked(1), 2u);
  EXPECT_EQ(locked(1), 3u);
  EXPECT_EQ(backend.keys.size(), 1u);
}

TEST(LockOnCalls, IdleLocksAreBounded) {
  FakeBackend backend;
  const auto locker = fake_locker(backend);
  const auto locked = locker.lock_on<0>("bounded", [](int) {});
  for (int i = 0; i < 100; ++i) locked(i);
  EXPECT_EQ(backend.keys.size(), 100u);
  locked(99);  // recent: still idle
  EXPECT_EQ(backend.keys.size(), 100u);
  locked(0);  // long evicted: made again
  EXPECT_EQ(backend.keys.size(), 101u);
}

// ------------------------------------------------------------ concurrency

TEST(LockOnCalls, SameKeyExcludesDifferentKeysDoNot) {
  FakeBackend backend;
  const auto locker = fake_locker(backend, {.max_retry = 0, .timeout = 10s});
  std::atomic<int> inside_a{0};
  std::atomic<int> max_inside_a{0};
  std::atomic<int> inside_any{0};
  std::atomic<int> max_inside_any{0};
  const auto locked = locker.lock_on<0>("mix", [&](int key) {
    const int any = ++inside_any;
    max_inside_any = std::max(max_inside_any.load(), any);
    if (key == 0) {
      const int a = ++inside_a;
      max_inside_a = std::max(max_inside_a.load(), a);
    }
    std::this_thread::sleep_for(2ms);
    if (key == 0) --inside_a;
    --inside_any;
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) locked(t % 2 == 0 ? 0 : t);
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(max_inside_a.load(), 1);
  EXPECT_GT(max_inside_any.load(), 1);
}

}  // namespace
