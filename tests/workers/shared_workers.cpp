// Worker commands for ReadWriteLock and Semaphore tests:
//   rw_hold URL NAME MODE TTL_MS
//       MODE "read" or "write": acquires (waiting), prints "acquired", then
//       sleeps until killed (bounded: 60 s), releases and exits 0.
//   sem_hold URL NAME PERMITS TTL_MS
//       the same with one permit of a semaphore.
//   rw_wait_threads URL NAME TTL_MS THREADS [clients]
//       THREADS threads of this process (one Client, or one each with
//       "clients": then they queue through different subscribers) each wait
//       up to 20 s for the write lock with a TTL_MS lease and release it at
//       once; prints "ready" when they started.
//   rw_hold_threads URL NAME TTL_MS THREADS
//       THREADS threads of this process each wait for the write lock
//       (TTL_MS lease, auto-renewed); the one that gets it prints "acquired"
//       and holds it until SIGKILLed (gives up after 60 s); the others stay
//       queued.
//   sem_custom_hold_threads URL NAME TTL_MS THREADS
//       as rw_hold_threads, with a permit of a 1-permit semaphore taken
//       through SharedLeaseLock with a caller-chosen token per thread.
//   rw_mix URL NAME COUNTER ROUNDS
//       ROUNDS alternations of a writer's racy GET/SET increment and a
//       reader's hold checking that COUNTER does not change under it. Exits 1
//       (printing "violation") if it did.
//   sem_count URL NAME PERMITS INSIDE MAX ROUNDS
//       ROUNDS holds of a permit; inside, INCR INSIDE (concurrent holders),
//       records the peak with a MAX key (Lua max), DECR. Exits 1 if more
//       than PERMITS were inside.
#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/read_write_lock.hpp"
#include "lockon/semaphore.hpp"
#include "lockon/shared_lease.hpp"
#include "support/worker_registry.hpp"
#include "thread_clients.hpp"

namespace {

using namespace std::chrono_literals;

int shared_usage(const char* text) {
  std::cerr << "usage: " << text << '\n';
  return 2;
}

void sleep_until_killed() {
  for (int i = 0; i < 600; ++i) std::this_thread::sleep_for(100ms);
}

long long get_number(const lockon::Client& data, const std::string& key) {
  const lockon::Reply value = data.command({"GET", key});
  return value.is_nil() ? 0 : std::stoll(value.as_string());
}

}  // namespace

LOCKON_WORKER_COMMAND(rw_hold)(const std::vector<std::string>& args) -> int {
  if (args.size() != 4) return shared_usage("rw_hold URL NAME read|write TTL_MS");
  const lockon::Client client(args[0]);
  lockon::ReadWriteLock lock(client, args[1], {.ttl = std::chrono::milliseconds(std::stoll(args[3]))});
  if (args[2] == "read") lock.lock_shared();
  else lock.lock();
  std::cout << "acquired" << std::endl;
  sleep_until_killed();
  return 0;
}

LOCKON_WORKER_COMMAND(sem_hold)(const std::vector<std::string>& args) -> int {
  if (args.size() != 4) return shared_usage("sem_hold URL NAME PERMITS TTL_MS");
  const lockon::Client client(args[0]);
  lockon::Semaphore semaphore(client, args[1], std::stoll(args[2]),
                              {.ttl = std::chrono::milliseconds(std::stoll(args[3]))});
  semaphore.acquire();
  std::cout << "acquired" << std::endl;
  sleep_until_killed();
  return 0;
}

// THREADS (args[3]) threads of one process (one Client, or one each if
// args[4] is "clients") each run `body(lock)` with a ReadWriteLock of NAME
// (args[1]) and a TTL_MS (args[2]) lease; prints "ready" when they started.
template <class Body>
void in_rw_threads(const std::vector<std::string>& args, Body body) {
  const bool own_clients = args.size() > 4 && args[4] == "clients";
  const auto count = static_cast<std::size_t>(std::stoll(args[3]));
  const lockon::test::worker::ThreadClients clients(args[0], count, own_clients);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < count; ++t) {
    threads.emplace_back([&, t] {
      lockon::ReadWriteLock lock(clients.of(t), args[1], {.ttl = std::chrono::milliseconds(std::stoll(args[2]))});
      body(lock);
    });
  }
  std::cout << "ready" << std::endl;
  for (auto& thread : threads) thread.join();
}

LOCKON_WORKER_COMMAND(rw_wait_threads)(const std::vector<std::string>& args) -> int {
  if (args.size() != 4 && args.size() != 5) return shared_usage("rw_wait_threads URL NAME TTL_MS THREADS [clients]");
  in_rw_threads(args, [](lockon::ReadWriteLock& lock) {
    if (lock.try_lock_for(20s)) lock.unlock();
  });
  return 0;
}

LOCKON_WORKER_COMMAND(rw_hold_threads)(const std::vector<std::string>& args) -> int {
  if (args.size() != 4) return shared_usage("rw_hold_threads URL NAME TTL_MS THREADS");
  in_rw_threads(args, [](lockon::ReadWriteLock& lock) {
    if (!lock.try_lock_for(60s)) return;
    std::cout << "acquired" << std::endl;
    sleep_until_killed();
    lock.unlock();
  });
  return 1;
}

LOCKON_WORKER_COMMAND(sem_custom_hold_threads)(const std::vector<std::string>& args) -> int {
  if (args.size() != 4) return shared_usage("sem_custom_hold_threads URL NAME TTL_MS THREADS");
  const lockon::Client client(args[0]);
  const auto count = std::stoi(args[3]);
  std::vector<std::thread> threads;
  for (int t = 0; t < count; ++t) {
    threads.emplace_back([&, t] {
      const auto permit = lockon::SharedLeaseLock::permit(
          client, args[1], 1,
          {.ttl = std::chrono::milliseconds(std::stoll(args[2])), .token = "custom-" + std::to_string(t)});
      if (!permit->try_lock_for(60s)) return;
      std::cout << "acquired" << std::endl;
      sleep_until_killed();
      permit->unlock();
    });
  }
  for (auto& thread : threads) thread.join();
  return 1;
}

LOCKON_WORKER_COMMAND(rw_mix)(const std::vector<std::string>& args) -> int {
  if (args.size() != 4) return shared_usage("rw_mix URL NAME COUNTER ROUNDS");
  const lockon::Client client(args[0]);
  const lockon::Client data(args[0]);
  lockon::ReadWriteLock lock(client, args[1], {.ttl = 10s});
  const int rounds = std::stoi(args[3]);
  for (int i = 0; i < rounds; ++i) {
    if (!lock.try_lock_for(20s)) return 4;
    data.command({"SET", args[2], std::to_string(get_number(data, args[2]) + 1)});
    lock.unlock();
    if (!lock.try_lock_shared_for(20s)) return 4;
    const long long before = get_number(data, args[2]);
    std::this_thread::sleep_for(200us);
    const long long after = get_number(data, args[2]);
    lock.unlock_shared();
    if (before != after) {
      std::cout << "violation " << before << " -> " << after << std::endl;
      return 1;
    }
  }
  return 0;
}

LOCKON_WORKER_COMMAND(sem_count)(const std::vector<std::string>& args) -> int {
  if (args.size() != 6) return shared_usage("sem_count URL NAME PERMITS INSIDE MAX ROUNDS");
  const lockon::Client client(args[0]);
  const lockon::Client data(args[0]);
  const long long permits = std::stoll(args[2]);
  lockon::Semaphore semaphore(client, args[1], permits, {.ttl = 10s});
  const int rounds = std::stoi(args[5]);
  for (int i = 0; i < rounds; ++i) {
    if (!semaphore.try_acquire_for(20s)) return 4;
    const long long inside = data.command({"INCR", args[3]}).as_integer();
    data.command({"EVAL", "if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then "
                          "redis.call('SET', KEYS[1], ARGV[1]) end return 0",
                  "1", args[4], std::to_string(inside)});
    std::this_thread::sleep_for(300us);
    data.command({"DECR", args[3]});
    semaphore.release();
    if (inside > permits) {
      std::cout << "violation " << inside << std::endl;
      return 1;
    }
  }
  return 0;
}
