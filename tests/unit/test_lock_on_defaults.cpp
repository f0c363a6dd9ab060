// unit/test_lock_on_defaults.cpp — LockerPolicy's defaults over a fake
// backend: lock_on waits up to its timeout (no attempt count ends it
// first), try_lock_on makes one immediate try unless given a policy of its
// own.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>

#include "../support/steady_time.hpp"
#include "lock_on_fake_backend.hpp"
#include "lockon/lockon.hpp"

namespace {

using namespace std::literals;
using Clock = std::chrono::steady_clock;
using lockon::test::FakeBackend;
using lockon::test::fake_locker;
using lockon::test::ms_since;

// issue 35 §6: LockerPolicy{.timeout = 30s} gave up after 6 s (the default
// max_retry 3 × retry_delay 2 s ended first), and try_lock_on with the
// locker's policy blocked 6 s before saying "busy".
TEST(LockOnCalls, DefaultsDoWhatTheirNamesSay) {
  const lockon::LockerPolicy defaults;
  EXPECT_EQ(defaults.max_retry, 0) << "no attempt count ends the wait before the timeout";
  FakeBackend backend;
  // The timeout is the bound: 2.5 windows of retry_delay, not max_retry of them.
  const auto locker = fake_locker(backend, {.retry_delay = 100ms, .timeout = 250ms});
  const auto locked = locker.lock_on<0>("busy", [](int) { ADD_FAILURE() << "must not run"; });
  backend.set_held(locked.key_for(1), true);
  auto start = Clock::now();
  EXPECT_THROW(locked(1), lockon::AcquireTimeout);
  EXPECT_GE(ms_since(start), 249);
  EXPECT_EQ(backend.attempts(), 3);

  // try_lock_on with the locker's policy: one immediate try.
  const auto tried = locker.try_lock_on<0>("busy", [](int x) { return x; });
  backend.set_held(tried.key_for(1), true);
  int before = backend.attempts();
  start = Clock::now();
  EXPECT_EQ(tried(1), std::nullopt);
  EXPECT_LT(ms_since(start), 50);
  EXPECT_EQ(backend.attempts(), before + 1);

  // With a policy of its own it waits as that policy says.
  const auto patient = locker.try_lock_on<0>("busy", [](int x) { return x; },
                                             {.policy = lockon::LockerPolicy{.max_retry = 2, .retry_delay = 30ms}});
  backend.set_held(patient.key_for(1), true);
  before = backend.attempts();
  start = Clock::now();
  EXPECT_EQ(patient(1), std::nullopt);
  EXPECT_GE(ms_since(start), 59);
  EXPECT_EQ(backend.attempts(), before + 2);
}

}  // namespace
