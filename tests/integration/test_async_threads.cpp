// integration/test_async_threads.cpp — one AsyncClient on an io_context run
// by 4 threads: 1,000 coroutines (on the io_context itself, not a strand)
// contend for 10 keys; the counters on the server and an in-process counter
// touched only under the lock are exact, and the coroutines really ran on
// several threads.
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class AsyncThreadsTest : public RedisTest {};

TEST_F(AsyncThreadsTest, FourThreadsThousandCoroutinesCountExactly) {
  constexpr int kThreads = 4;
  constexpr int kCoroutines = 1000;
  constexpr int kKeys = 10;
  constexpr int kRounds = 3;
  asio::io_context io(kThreads);
  AsyncClient client(io.get_executor(), server().url() + "?connect_timeout=20s",
                     AsyncClientOptions{.multi_threaded = true});
  const std::string prefix = key("mt");
  // Plain loads and stores (no read-modify-write): a critical section that
  // overlaps another one on the same key loses an increment.
  std::array<std::atomic<long long>, kKeys> local{};
  std::atomic<int> completed{0};
  std::atomic<int> failed{0};
  std::mutex mutex;
  std::set<std::thread::id> threads_seen;
  std::string first_error;
  for (int i = 0; i < kCoroutines; ++i) {
    asio::co_spawn(io, [&, i]() -> asio::awaitable<void> {
      const int k = i % kKeys;
      const std::string name = prefix + ":" + std::to_string(k);
      AsyncLock lock(client, name, LockOptions{.ttl = 60s, .wait_poll_interval = 2s});
      for (int round = 0; round < kRounds; ++round) {
        co_await lock.async_lock();
        {
          std::lock_guard guard(mutex);
          threads_seen.insert(std::this_thread::get_id());
        }
        const long long seen = local[k].load(std::memory_order_relaxed);
        std::vector<std::string> get{"GET", name + ":counter"};
        const Reply value = co_await client.async_command(get);
        const long long next = value.is_nil() ? 1 : std::stoll(value.as_string()) + 1;
        std::vector<std::string> set{"SET", name + ":counter", std::to_string(next)};
        co_await client.async_command(set);
        local[k].store(seen + 1, std::memory_order_relaxed);
        co_await lock.async_unlock();
      }
    }, [&](std::exception_ptr error) {
      if (error) {
        ++failed;
        std::lock_guard guard(mutex);
        if (first_error.empty()) {
          try {
            std::rethrow_exception(error);
          } catch (const std::exception& e) {
            first_error = e.what();
          }
        }
      }
      if (++completed == kCoroutines) io.stop();
    });
  }
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&] { io.run_for(120s); });
  for (auto& t : threads) t.join();
  const auto elapsed = Clock::now() - start;
  EXPECT_EQ(completed.load(), kCoroutines) << "no hang (a lost wake-up would stall a connection)";
  EXPECT_EQ(failed.load(), 0) << first_error;
  EXPECT_GE(threads_seen.size(), 2u) << "critical sections ran on several threads";
  for (int k = 0; k < kKeys; ++k) {
    const auto counter = server().command({"GET", prefix + ":" + std::to_string(k) + ":counter"});
    EXPECT_EQ(counter.str, std::to_string(kCoroutines / kKeys * kRounds)) << "key " << k;
    EXPECT_EQ(local[k].load(), kCoroutines / kKeys * kRounds) << "key " << k;
  }
  std::printf("4 threads, 1,000 coroutines x %d rounds on %d keys: %.2f s, %zu threads ran sections\n", kRounds,
              kKeys, std::chrono::duration<double>(elapsed).count(), threads_seen.size());
}

}  // namespace
}  // namespace lockon::test
