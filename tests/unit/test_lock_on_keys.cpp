// Keys through the lock_on API (no server): golden values, position
// selection, the entity scope, value-based equivalences across parameter
// types, distinct keys for inputs a ':'-join would confuse, and validation.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "lockon/lockon.hpp"

namespace {

using namespace std::literals;

struct Card {
  std::string number;
};

}  // namespace

template <>
struct lockon::ArgEncoder<Card> {
  static void encode(lockon::Encoder& enc, const Card& card) { enc.add(card.number); }
};

namespace {

int transfer(int amount, const std::string& to) { return amount + static_cast<int>(to.size()); }
int charge(long id, std::string_view user, const char* currency) {
  return static_cast<int>(id + static_cast<long>(user.size() + std::string_view(currency).size()));
}
void withdraw(const std::string&, int) {}
void deposit(const std::string&, int) {}
void nightly() {}
void pair_of_strings(const std::string&, const std::string&) {}

struct CardAccount {
  Card card;
  int debit(int amount) { return amount; }
};

}  // namespace

template <>
struct lockon::ArgEncoder<CardAccount> {
  static void encode(lockon::Encoder& enc, const CardAccount& account) { enc.add(account.card); }
};

namespace {

// A server that is never contacted: building lockers and keys does no I/O.
lockon::RedisLocker offline_locker(lockon::LockerPolicy policy = {}) {
  return lockon::RedisLocker("redis://127.0.0.1:1", std::move(policy));
}

TEST(LockOnKeys, GoldenKeys) {
  const auto locker = offline_locker();
  // Pinned independently (Python hashlib over the documented encoding) and
  // shared with tests/unit/test_encoding.cpp: never change them to pass.
  EXPECT_EQ((locker.lock_on<0, 1>("transfer", &transfer).key_for(42, "x")),
            "lockon:84a0f3455dcca894ace136be62efa292:lock|9c7971fd1ce3caadcae959b850c8d9a5");
  EXPECT_EQ((locker.key_for<0, 1>("transfer", 42, "x")),
            "lockon:84a0f3455dcca894ace136be62efa292:lock|9c7971fd1ce3caadcae959b850c8d9a5");
  EXPECT_EQ(lockon::lock_on_key("lockon", "transfer", 42, "x"),
            "lockon:84a0f3455dcca894ace136be62efa292:lock|9c7971fd1ce3caadcae959b850c8d9a5");
  EXPECT_EQ(locker.lock_on<0>("bank::withdraw", &withdraw).key_for("card-1", 100),
            "lockon:46333029f2f4123362c4c380cad1b143:lock|7e174f4fc36880c08b200deba403401c");
  EXPECT_EQ(locker.lock_on<0>("bank::withdraw", &withdraw, {.scope = lockon::KeyScope::entity}).key_for("card-1", 7),
            "lockon:entity:lock|7e174f4fc36880c08b200deba403401c");
  EXPECT_EQ(lockon::entity_lock_key("lockon", "acct-1"s), "lockon:entity:lock|ab16904ccc637eb2de2b068c35f13eff");
  // No positions: the function identity alone (the empty argument tuple).
  EXPECT_EQ(locker.lock_on<>("audit::nightly", &nightly).key_for(),
            "lockon:1dc7ee0610922287fa38c3a1cf6b44fd:lock|f0e722544394c8161eee88b39bdee949");
}

TEST(LockOnKeys, PrefixComesFromThePolicy) {
  const auto locker = offline_locker({.key_prefix = "app"});
  EXPECT_EQ((locker.lock_on<0, 1, 2>("billing::charge", &charge).key_for(7, "user-123", "EUR")),
            "app:07f466e853db2ac460ecfea77cf1ef4e:lock|f5826963ae8acc72de582402d6e1f18e");
  EXPECT_EQ((locker.key_for<0, 1, 2>("billing::charge", 7, "user-123"s, "EUR"sv)),
            "app:07f466e853db2ac460ecfea77cf1ef4e:lock|f5826963ae8acc72de582402d6e1f18e");
  // A per-function policy's prefix wins.
  const auto other = locker.lock_on<0>("bank::withdraw", &withdraw, {.policy = lockon::LockerPolicy{.key_prefix = "x"}});
  EXPECT_EQ(other.key_for("card-1", 1).rfind("x:46333029f2f4123362c4c380cad1b143:lock|", 0), 0u);
}

TEST(LockOnKeys, PositionsSelectAndOrderTheArguments) {
  const auto locker = offline_locker();
  const auto first = locker.lock_on<0>("f", &pair_of_strings);
  const auto second = locker.lock_on<1>("f", &pair_of_strings);
  const auto both = locker.lock_on<0, 1>("f", &pair_of_strings);
  const auto swapped = locker.lock_on<1, 0>("f", &pair_of_strings);
  const auto none = locker.lock_on<>("f", &pair_of_strings);

  EXPECT_EQ(first.key_for("a", "b"), first.key_for("a", "zzz"));  // position 1 is not part of the key
  EXPECT_NE(first.key_for("a", "b"), first.key_for("b", "b"));
  EXPECT_EQ(second.key_for("a", "b"), second.key_for("zzz", "b"));
  EXPECT_EQ(first.key_for("a", "b"), lockon::lock_on_key("lockon", "f", "a"));
  EXPECT_EQ(both.key_for("a", "b"), lockon::lock_on_key("lockon", "f", "a", "b"));
  EXPECT_EQ(swapped.key_for("a", "b"), lockon::lock_on_key("lockon", "f", "b", "a"));
  EXPECT_NE(both.key_for("a", "b"), swapped.key_for("a", "b"));
  EXPECT_EQ(none.key_for("a", "b"), none.key_for("c", "d"));
  EXPECT_EQ(none.key_for("a", "b"), lockon::lock_on_key("lockon", "f"));
}

TEST(LockOnKeys, TheFunctionIdentityIsPartOfTheKeyUnlessDropped) {
  const auto locker = offline_locker();
  const auto w = locker.lock_on<0>("bank::withdraw", &withdraw);
  const auto d = locker.lock_on<0>("bank::deposit", &deposit);
  EXPECT_NE(w.key_for("card-1", 1), d.key_for("card-1", 1));

  const lockon::LockOnOptions entity{.scope = lockon::KeyScope::entity};
  const auto we = locker.lock_on<0>("bank::withdraw", &withdraw, entity);
  const auto de = locker.lock_on<0>("bank::deposit", &deposit, entity);
  EXPECT_EQ(we.key_for("card-1", 1), de.key_for("card-1", 99));
  EXPECT_EQ(we.key_for("card-1", 1), locker.entity_key_for<0>("card-1"s, 5));
  EXPECT_NE(we.key_for("card-1", 1), we.key_for("card-2", 1));
  EXPECT_EQ(we.scope(), lockon::KeyScope::entity);
  EXPECT_EQ(w.scope(), lockon::KeyScope::function);
  EXPECT_EQ(w.name(), "bank::withdraw");
}

// The same value through differently typed parameters names the same lock:
// processes need not agree on exact C++ types, only on values.
void by_int(int) {}
void by_long_long(long long) {}
void by_unsigned(unsigned short) {}
void by_int8(std::int8_t) {}
void by_string(const std::string&) {}
void by_view(std::string_view) {}
void by_cstr(const char*) {}
void by_ms(std::chrono::milliseconds) {}
void by_ns(std::chrono::nanoseconds) {}
void by_vector(const std::vector<int>&) {}
void by_set(const std::set<int>&) {}

TEST(LockOnKeys, ValueBasedAcrossParameterTypes) {
  const auto locker = offline_locker();
  const std::string k42 = locker.lock_on<0>("n", &by_int).key_for(42);
  EXPECT_EQ(locker.lock_on<0>("n", &by_long_long).key_for(42LL), k42);
  EXPECT_EQ(locker.lock_on<0>("n", &by_unsigned).key_for(static_cast<unsigned short>(42)), k42);
  EXPECT_EQ(locker.lock_on<0>("n", &by_int8).key_for(static_cast<std::int8_t>(42)), k42);
  EXPECT_NE(locker.lock_on<0>("n", &by_int).key_for(-42), k42);

  const std::string kx = locker.lock_on<0>("s", &by_string).key_for("card");
  EXPECT_EQ(locker.lock_on<0>("s", &by_view).key_for("card"), kx);
  EXPECT_EQ(locker.lock_on<0>("s", &by_cstr).key_for("card"), kx);
  EXPECT_EQ(locker.key_for<0>("s", "card"), kx);  // a char array
  EXPECT_EQ(locker.key_for<0>("s", "card"s), kx);

  EXPECT_EQ(locker.lock_on<0>("d", &by_ms).key_for(1500ms), locker.lock_on<0>("d", &by_ns).key_for(1'500'000'000ns));
  EXPECT_EQ(locker.lock_on<0>("c", &by_vector).key_for({1, 2, 3}), locker.lock_on<0>("c", &by_set).key_for({3, 2, 1}));
}

TEST(LockOnKeys, InputsThatAColonJoinWouldConfuseGetDistinctKeys) {
  const auto locker = offline_locker();
  const auto two = locker.lock_on<0, 1>("f", &pair_of_strings);
  const auto one = locker.lock_on<0>("g", &by_string);
  const auto vec = locker.lock_on<0>("g", [](const std::vector<std::string>&) {});
  const auto opt = locker.lock_on<0>("g", [](const std::optional<std::string>&) {});
  const auto num = locker.lock_on<0>("g", &by_int);

  const std::vector<std::string> keys = {
      two.key_for("a:b", ""), two.key_for("a", ":b"),   two.key_for("a:", "b"), two.key_for("", "a:b"),
      two.key_for("a", "b"),  two.key_for("ab", ""),    two.key_for("", "ab"),  two.key_for("a\0b"s, ""),
      two.key_for("a", "b\0"s), one.key_for("a:b"),     one.key_for("1"),       one.key_for(""),
      one.key_for("ab"),      vec.key_for({"a", "b"}),  vec.key_for({"a:b"}),   vec.key_for({}),
      vec.key_for({""}),      opt.key_for(std::nullopt), opt.key_for(""),       opt.key_for("None"),
      num.key_for(1),         num.key_for(0),           num.key_for(-1),
  };
  std::set<std::string> distinct;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_TRUE(distinct.insert(keys[i]).second) << "key #" << i << " repeats: " << keys[i];
  }
  // The same inputs under another function name are other keys again
  // (and through a different identity they stay distinct among themselves).
  EXPECT_NE((locker.lock_on<0, 1>("h", &pair_of_strings).key_for("a:b", "")), keys[0]);
}

TEST(LockOnKeys, MemberFunctionsCountTheObjectAsPositionZero) {
  const auto locker = offline_locker();
  const auto debit_by_account = locker.lock_on<0>("acct::debit", &CardAccount::debit);
  const auto debit_by_amount = locker.lock_on<1>("acct::debit", &CardAccount::debit);
  const CardAccount a{Card{"4111"}};
  EXPECT_EQ(debit_by_account.key_for(a, 5), lockon::lock_on_key("lockon", "acct::debit", a));
  EXPECT_EQ(debit_by_account.key_for(a, 5), debit_by_account.key_for(CardAccount{Card{"4111"}}, 6));
  EXPECT_EQ(debit_by_amount.key_for(a, 5), lockon::lock_on_key("lockon", "acct::debit", 5));
}

TEST(LockOnKeys, ContextParameterIsNotAPosition) {
  const auto locker = offline_locker();
  const auto with_context = locker.lock_on<0>("bank::withdraw", [](lockon::LockContext&, const std::string&, int) {});
  EXPECT_EQ(with_context.key_for("card-1", 100),
            "lockon:46333029f2f4123362c4c380cad1b143:lock|7e174f4fc36880c08b200deba403401c");
}

TEST(LockOnKeys, InvalidConfigurationIsRejectedEarly) {
  const auto locker = offline_locker();
  EXPECT_THROW((void)locker.lock_on<0>("", &by_int), lockon::ConfigError);
  EXPECT_THROW((void)locker.try_lock_on<0>("", &by_int), lockon::ConfigError);
  EXPECT_THROW((void)lockon::lock_on_key("", "f", 1), lockon::ConfigError);
  EXPECT_THROW((void)lockon::lock_on_key("p", "", 1), lockon::ConfigError);
  EXPECT_THROW(offline_locker({.key_prefix = ""}), lockon::ConfigError);
  EXPECT_THROW(offline_locker({.max_retry = -1}), lockon::ConfigError);
  EXPECT_THROW(offline_locker({.retry_delay = -1ms}), lockon::ConfigError);
  EXPECT_THROW(offline_locker({.retry_jitter = -1ms}), lockon::ConfigError);
  EXPECT_THROW(offline_locker({.timeout = -1ms}), lockon::ConfigError);
  EXPECT_THROW(offline_locker({.ttl = 0ms}), lockon::ConfigError);
  EXPECT_THROW(offline_locker({.timeout = std::chrono::hours(24 * 366)}), lockon::ConfigError);
  EXPECT_THROW(offline_locker({.max_retry = 0, .retry_delay = 0ms}), lockon::ConfigError);  // would spin
  EXPECT_NO_THROW(offline_locker({.max_retry = 0, .timeout = 0ms}));                      // waits forever: allowed
  EXPECT_THROW((void)locker.lock_on<0>("f", &by_int, {.policy = lockon::LockerPolicy{.ttl = -5ms}}), lockon::ConfigError);
  EXPECT_THROW(lockon::RedisLocker(lockon::LockFactory{}), lockon::ConfigError);
  EXPECT_THROW(lockon::RedisLocker("not a url"), lockon::ConfigError);
  EXPECT_THROW(lockon::RedisLocker::redlock({}), lockon::ConfigError);
  // NaN cannot name a lock: reported when the key is derived.
  EXPECT_THROW((void)locker.lock_on<0>("f", [](double) {}).key_for(std::nan("")), lockon::ConfigError);
}

// The defaults say what their names say (issue 35 §6): the timeout is the
// bound (no attempt count ends the wait first); the seed decorator's "three
// tries, 2 s apart" stays one spelling away.
TEST(LockOnKeys, DefaultPolicyWaitsUpToItsTimeoutAndTheSeedsIsReachable) {
  const lockon::LockerPolicy policy;
  EXPECT_EQ(policy.max_retry, 0);
  EXPECT_EQ(policy.retry_delay, 2s);
  EXPECT_EQ(policy.timeout, 10s);
  EXPECT_EQ(policy.ttl, 30s);
  EXPECT_EQ(policy.key_prefix, lockon::kDefaultKeyPrefix);
  EXPECT_TRUE(policy.auto_renew);
  EXPECT_FALSE(policy.fencing);
  EXPECT_NO_THROW(offline_locker({.max_retry = 3, .retry_delay = 2s, .timeout = 0ms}));
  // retry_delay 0 alone would now spin until the timeout: refused, saying why.
  try {
    offline_locker({.retry_delay = 0ms});
    ADD_FAILURE() << "accepted";
  } catch (const lockon::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("max_retry"), std::string::npos) << e.what();
  }
}

}  // namespace
