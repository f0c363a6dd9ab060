// examples/compile_time.cpp — locked functions declared at namespace scope.
//
// decorate<"name", positions...>(fn) fixes the function identity and the
// locked argument positions at compile time; the compiler computes the
// identity's MD5 (lockon's constexpr MD5), checks the positions and that the
// arguments can be encoded. Calls use the process-wide default locker
// (set here from LOCKON_REDIS_URL), or an explicit one with .with(locker).
//
//   LOCKON_REDIS_URL=redis://127.0.0.1:6379 ./compile_time
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include <lockon/lockon.hpp>

namespace bank {

long long withdraw(lockon::LockContext& lock, const std::string& card, long long amount) {
  std::cout << "  withdraw " << amount << " from " << card << " under " << lock.key() << '\n';
  return 1000 - amount;
}

long long deposit(const std::string& card, long long amount) {
  std::cout << "  deposit " << amount << " to " << card << '\n';
  return 1000 + amount;
}

// Locked on the card (position 0: the injected LockContext is not counted).
inline constexpr auto locked_withdraw = lockon::decorate<"bank::withdraw", 0>(&withdraw);

// Every operation on one card excluding each other: the entity scope drops
// the function identity from the key, so these two share one lock per card.
inline constexpr auto card_withdraw = lockon::decorate<"bank::withdraw", 0>(&withdraw, lockon::KeyScope::entity);
inline constexpr auto card_deposit = lockon::decorate<"bank::deposit", 0>(&deposit, lockon::KeyScope::entity);

// Computed by the compiler; equals md5("bank::withdraw").
static_assert(std::string_view(decltype(locked_withdraw)::identity_digest.data(), 32) ==
              "46333029f2f4123362c4c380cad1b143");

}  // namespace bank

int main() {
  const char* env = std::getenv("LOCKON_REDIS_URL");
  const std::string url = env != nullptr && *env != '\0' ? env : "redis://127.0.0.1:6379";
  try {
    lockon::set_default_locker(lockon::RedisLocker(url));

    const long long balance = bank::locked_withdraw("card-1", 100);  // the default locker
    std::cout << "balance " << balance << '\n';
    std::cout << "key: " << bank::locked_withdraw.key_for("card-1", 100) << '\n';

    std::cout << "shared entity lock: " << bank::card_withdraw.key_for("card-1", 1) << '\n'
              << "                    " << bank::card_deposit.key_for("card-1", 1) << '\n';
    bank::card_deposit("card-1", 50);

    // An explicit locker with its own namespace and policy.
    const lockon::RedisLocker tenant(url, {.max_retry = 1, .retry_delay = std::chrono::milliseconds(0),
                                           .key_prefix = "tenant-42"});
    const long long tenant_balance = bank::locked_withdraw.with(tenant)("card-1", 5);
    std::cout << "balance " << tenant_balance << '\n';
    if (const std::optional<long long> tried = bank::locked_withdraw.try_with(tenant)("card-1", 7)) {
      std::cout << "try: balance " << *tried << '\n';
    } else {
      std::cout << "try: busy, did not run\n";
    }
  } catch (const lockon::Error& e) {
    std::cerr << "compile_time: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
