// integration/attack_mix.hpp — the lock traffic of
// AutoPipelineAttack.MutualExclusion... (test_auto_pipeline_attack.cpp), run
// by threads of the test process and by worker processes (attack_mix in
// tests/workers/attack_workers.cpp) at the same time, while the test
// freezes and stalls the server.
//
// Each round picks one of kLocks keys and one way to take it: lock(),
// try_lock_for(1-3 ms) (its SET may run after the caller gave up: outcome
// unknown), or try_lock_for(2 s). Holding it, a non-atomic read-modify-write
// of the key's counter through a separate pooled Client with a 10 s socket
// timeout (never fails under the test's < 2 s stalls), plus:
// - INCR/DECR of an "inside" key: INCR must answer 1 (nobody else inside);
// - on fenced keys (even index), RPUSH of the fence: the list must end
//   strictly increasing.
// The caller checks counter == sections per key, across every process.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"

namespace lockon::test::attack {

inline constexpr int kLocks = 2;

struct MixResult {
  std::array<long long, kLocks> sections{};  // critical sections completed, per key
  long long typed_errors = 0;                // lockon::Error from lock()/try_lock_for()
  long long timeouts = 0;                    // try_lock_for() returned false
  long long lost = 0;                        // the lease was reported lost while held
  std::string failure;                       // empty: no guarantee broken
};

inline std::string lock_key(const std::string& prefix, int i) { return prefix + ":lock:" + std::to_string(i); }
inline std::string counter_key(const std::string& prefix, int i) { return prefix + ":counter:" + std::to_string(i); }
inline std::string inside_key(const std::string& prefix, int i) { return prefix + ":inside:" + std::to_string(i); }
inline std::string fences_key(const std::string& prefix, int i) { return prefix + ":fences:" + std::to_string(i); }

/// Runs rounds until `stop` (at most 100000). `client`: the Client under
/// test; `data`: a pooled Client with a long socket timeout.
inline MixResult run_mix(const Client& client, const Client& data, const std::string& prefix,
                         std::chrono::steady_clock::time_point stop, unsigned seed) {
  using namespace std::chrono_literals;
  MixResult result;
  std::mt19937 random(seed);
  std::array<std::unique_ptr<Lock>, kLocks> locks;
  for (int i = 0; i < kLocks; ++i)
    locks[i] = std::make_unique<Lock>(client, lock_key(prefix, i), LockOptions{.ttl = 5s, .fencing = i % 2 == 0});
  for (int round = 0; round < 100000 && std::chrono::steady_clock::now() < stop; ++round) {
    const int i = static_cast<int>(random() % kLocks);
    Lock& lock = *locks[i];
    const auto mode = static_cast<unsigned>(random() % 3);
    try {
      bool acquired = true;
      if (mode == 0) lock.lock();
      else if (mode == 1) acquired = lock.try_lock_for(std::chrono::milliseconds(1 + random() % 3));
      else acquired = lock.try_lock_for(2s);
      if (!acquired) {
        ++result.timeouts;
        continue;
      }
    } catch (const Error&) {
      ++result.typed_errors;
      continue;
    } catch (const std::exception& e) {
      result.failure = std::string("untyped error from the lock: ") + e.what();
      return result;
    }
    try {
      if (data.command({"INCR", inside_key(prefix, i)}).as_integer() != 1) {
        result.failure = "two holders of " + lock_key(prefix, i) + " at once";
        lock.unlock();
        return result;
      }
      const Reply value = data.command({"GET", counter_key(prefix, i)});
      const long long next = (value.is_nil() ? 0 : std::stoll(value.as_string())) + 1;
      if (i % 2 == 0) data.command({"RPUSH", fences_key(prefix, i), std::to_string(lock.fence())});
      data.command({"SET", counter_key(prefix, i), std::to_string(next)});
      data.command({"DECR", inside_key(prefix, i)});
      ++result.sections[i];
    } catch (const std::exception& e) {
      result.failure = std::string("the data connection failed inside the lock: ") + e.what();
      lock.unlock();
      return result;
    }
    if (lock.lost()) ++result.lost;
    lock.unlock();
  }
  return result;
}

}  // namespace lockon::test::attack
