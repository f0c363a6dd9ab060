// Compile-time decoration (lockon/decorate.hpp): the identity digest is a
// constant checked against MD5 test vectors by static_assert and against
// OpenSSL at run time; decorated functions at namespace scope; the default
// locker and explicit lockers.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "lock_on_fake_backend.hpp"
#include "lockon/lockon.hpp"

namespace bank {
int withdraw(const std::string& card, int amount) { return static_cast<int>(card.size()) * 1000 + amount; }
int deposit(const std::string& card, int amount) { return static_cast<int>(card.size()) * 1000 - amount; }
}  // namespace bank

namespace {

// Declared exactly as a user would: namespace scope, constexpr.
inline constexpr auto locked_withdraw = lockon::decorate<"bank::withdraw", 0>(&bank::withdraw);
inline constexpr auto locked_deposit_entity = lockon::decorate<"bank::deposit", 0>(&bank::deposit, lockon::KeyScope::entity);
inline constexpr auto locked_withdraw_entity =
    lockon::decorate<"bank::withdraw", 0>(&bank::withdraw, lockon::KeyScope::entity);
inline constexpr auto locked_nightly = lockon::decorate<"audit::nightly">([] { return 1; });

template <class D>
constexpr std::string_view digest_of(const D&) {
  return {D::identity_digest.data(), D::identity_digest.size()};
}

// RFC 1321 test vectors, checked by the compiler.
static_assert(digest_of(lockon::decorate<"a">([] {})) == "0cc175b9c0f1b6a831c399e269772661");
static_assert(digest_of(lockon::decorate<"abc">([] {})) == "900150983cd24fb0d6963f7d28e17f72");
static_assert(digest_of(lockon::decorate<"message digest">([] {})) == "f96b697d7cb7938d525a2f31aaf161d0");
static_assert(digest_of(lockon::decorate<"abcdefghijklmnopqrstuvwxyz">([] {})) == "c3fcd3d76192e4007dfb496cca67e13b");
static_assert(digest_of(lockon::decorate<"12345678901234567890123456789012345678901234567890123456789012345678901234567890">(
                  [] {})) == "57edf4a22be3c955ac49da2e2107b67a");
// And the identity of the namespace-scope declaration (Python hashlib).
static_assert(digest_of(locked_withdraw) == "46333029f2f4123362c4c380cad1b143");
static_assert(decltype(locked_withdraw)::name == "bank::withdraw");
static_assert(locked_withdraw.scope() == lockon::KeyScope::function);
static_assert(locked_deposit_entity.scope() == lockon::KeyScope::entity);

TEST(LockOnDecorate, CompileTimeDigestMatchesOpenSsl) {
  EXPECT_EQ(digest_of(locked_withdraw), lockon::md5_hex("bank::withdraw"));
  EXPECT_EQ(digest_of(locked_nightly), lockon::md5_hex("audit::nightly"));
  constexpr auto long_name = lockon::decorate<"a rather long::function::name<with, templates>(and, args) const">([] {});
  EXPECT_EQ(digest_of(long_name), lockon::md5_hex("a rather long::function::name<with, templates>(and, args) const"));
  EXPECT_EQ(digest_of(long_name), lockon::function_digest("a rather long::function::name<with, templates>(and, args) const"));
}

class LockOnDefaultLocker : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* url = std::getenv("LOCKON_REDIS_URL")) saved_ = url;
    ::unsetenv("LOCKON_REDIS_URL");
    lockon::reset_default_locker();
  }
  void TearDown() override {
    lockon::reset_default_locker();
    if (saved_) ::setenv("LOCKON_REDIS_URL", saved_->c_str(), 1);
    else ::unsetenv("LOCKON_REDIS_URL");
  }
  std::optional<std::string> saved_;
};

TEST_F(LockOnDefaultLocker, WithoutADefaultLockerTheCallSaysHowToConfigureOne) {
  try {
    locked_withdraw("card-1", 1);
    FAIL() << "expected ConfigError";
  } catch (const lockon::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("set_default_locker"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("LOCKON_REDIS_URL"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)locked_withdraw.key_for("card-1", 1), lockon::ConfigError);
}

TEST_F(LockOnDefaultLocker, LazilyCreatedFromTheEnvironment) {
  ::setenv("LOCKON_REDIS_URL", "redis://127.0.0.1:1/0", 1);  // never contacted: key_for does no I/O
  EXPECT_EQ(locked_withdraw.key_for("card-1", 5),
            "lockon:46333029f2f4123362c4c380cad1b143:lock|7e174f4fc36880c08b200deba403401c");
  ::setenv("LOCKON_REDIS_URL", "not a url", 1);  // already created: kept
  EXPECT_NO_THROW((void)locked_withdraw.key_for("card-1", 5));
  lockon::reset_default_locker();
  EXPECT_THROW((void)locked_withdraw.key_for("card-1", 5), lockon::ConfigError);
}

TEST_F(LockOnDefaultLocker, CallsUseTheDefaultOrAnExplicitLocker) {
  lockon::test::FakeBackend default_backend;
  lockon::test::FakeBackend other_backend;
  lockon::set_default_locker(lockon::test::fake_locker(default_backend, {.key_prefix = "dflt"}));
  const auto other = lockon::test::fake_locker(other_backend, {.key_prefix = "other"});

  EXPECT_EQ(locked_withdraw("card-1", 5), 6005);
  ASSERT_EQ(default_backend.keys.size(), 1u);
  EXPECT_EQ(default_backend.keys[0], "dflt:46333029f2f4123362c4c380cad1b143:lock|7e174f4fc36880c08b200deba403401c");

  EXPECT_EQ(locked_withdraw.with(other)("card-1", 6), 6006);
  ASSERT_EQ(other_backend.keys.size(), 1u);
  EXPECT_EQ(other_backend.keys[0], "other:46333029f2f4123362c4c380cad1b143:lock|7e174f4fc36880c08b200deba403401c");
  EXPECT_EQ(locked_withdraw.with(other).key_for("card-1", 6), other_backend.keys[0]);
  EXPECT_EQ(locked_withdraw.with(other).name(), "bank::withdraw");

  // The entity scope drops the identity: withdraw and deposit share a lock.
  EXPECT_EQ(locked_deposit_entity.key_for("card-1", 1), locked_withdraw_entity.key_for("card-1", 2));
  EXPECT_EQ(locked_deposit_entity.key_for("card-1", 1), "dflt:entity:lock|7e174f4fc36880c08b200deba403401c");
  EXPECT_EQ(locked_deposit_entity.with(other).key_for("card-1", 1), "other:entity:lock|7e174f4fc36880c08b200deba403401c");

  // try_with: busy is an empty result, a free key runs.
  const auto quick = lockon::test::fake_locker(
      default_backend, {.max_retry = 1, .retry_delay = std::chrono::milliseconds(0), .key_prefix = "dflt"});
  default_backend.set_held(locked_withdraw.key_for("card-2", 0), true);
  EXPECT_EQ(locked_withdraw.try_with(quick)("card-2", 1), std::nullopt);
  EXPECT_EQ(locked_withdraw.try_with(quick)("card-3", 1), 6001);
  EXPECT_EQ(locked_withdraw.try_with()("card-3", 2), 6002);
  EXPECT_EQ(locked_nightly(), 1);
}

}  // namespace
