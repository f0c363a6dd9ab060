// examples/per_entity.cpp — lock a function on one of its arguments.
//
// reserve(sku, quantity) does a read-check-write on a stock counter in Redis.
// Locked on the SKU, concurrent reservations of the same SKU run one at a
// time (in every process using the same name), while different SKUs proceed
// in parallel. Stock never goes negative and no reservation is lost.
//
//   LOCKON_REDIS_URL=redis://127.0.0.1:6379 ./per_entity
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <lockon/lockon.hpp>

using namespace std::chrono_literals;

namespace shop {

// Not atomic on its own: two concurrent calls for one SKU could both see
// enough stock. lock_on makes the whole function a critical section per SKU.
bool reserve(const lockon::Client& redis, const std::string& sku, int quantity) {
  const std::string key = "example:stock:" + sku;
  const long long stock = std::stoll(redis.command({"GET", key}).as_string());
  if (stock < quantity) return false;
  std::this_thread::sleep_for(1ms);  // some work between the check and the write
  redis.command({"SET", key, std::to_string(stock - quantity)});
  return true;
}

}  // namespace shop

int main() {
  const char* env = std::getenv("LOCKON_REDIS_URL");
  const std::string url = env != nullptr && *env != '\0' ? env : "redis://127.0.0.1:6379";
  try {
    const lockon::Client redis(url);
    const lockon::RedisLocker locker(redis, {.max_retry = 0, .retry_delay = 1s, .timeout = 10s});

    // Position 1 is the SKU (position 0, the client, is not part of the key).
    const auto reserve = locker.lock_on<1>("shop::reserve", &shop::reserve);

    const std::vector<std::string> skus{"apple", "pear", "plum"};
    for (const auto& sku : skus) redis.command({"SET", "example:stock:" + sku, "100"});

    std::vector<std::thread> buyers;
    std::vector<int> reserved(12, 0);
    for (int b = 0; b < 12; ++b) {
      buyers.emplace_back([&, b] {
        const std::string& sku = skus[static_cast<std::size_t>(b) % skus.size()];
        while (reserve(redis, sku, 3)) reserved[static_cast<std::size_t>(b)] += 3;  // until sold out
      });
    }
    for (auto& buyer : buyers) buyer.join();

    for (std::size_t i = 0; i < skus.size(); ++i) {
      int total = 0;
      for (std::size_t b = i; b < reserved.size(); b += skus.size()) total += reserved[b];
      std::cout << skus[i] << ": reserved " << total << ", left "
                << redis.command({"GET", "example:stock:" + skus[i]}).as_string() << " (of 100)\n";
    }
    std::cout << "lock key for 'apple': " << reserve.key_for(redis, "apple", 3) << '\n';

    // Busy as a value: a single immediate try (try_lock_on waits only when
    // given a policy of its own, LockOnOptions::policy).
    const auto try_reserve = locker.try_lock_on<1>("shop::reserve", &shop::reserve);
    if (const std::optional<bool> ok = try_reserve(redis, "pear", 1)) {
      std::cout << "try_reserve ran: " << (*ok ? "reserved" : "sold out") << '\n';
    } else {
      std::cout << "try_reserve: busy, did not run\n";
    }
    for (const auto& sku : skus) redis.command({"DEL", "example:stock:" + sku});
  } catch (const lockon::Error& e) {
    std::cerr << "per_entity: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
