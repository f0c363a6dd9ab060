// integration/shared_lease_support.hpp — helpers of the ReadWriteLock and
// Semaphore tests: threads whose exceptions become failures, and the
// steady clock in ns (comparable with the workers' output); the fixture of
// their fault tests (test_shared_faults.cpp, test_shared_paused.cpp,
// test_late_attempts.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "protocol/lock_scripts.hpp"
#include "lockon/semaphore.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

#include <gtest/gtest.h>

#include <memory>

namespace lockon::test {

// A server and a Client per test, and the shared locks' keys counted.
class SharedFaults : public ClientTest {
 protected:
  long long holders(const std::string& name) { return raw({"ZCARD", detail::companion_key(name, "sh")}).integer; }
  long long queued(const std::string& name) { return raw({"LLEN", detail::companion_key(name, "sq")}).integer; }
};

// A fixture whose clients talk through a FaultProxy (the scripts loaded, so
// faults hit EVALSHA).
class SharedProxyFaults : public SharedFaults {
 protected:
  void SetUp() override {
    SharedFaults::SetUp();
    if (HasFatalFailure()) return;
    proxy_ = std::make_unique<FaultProxy>(server().host(), server().port());
    via_proxy_ = std::make_unique<Client>(proxy_->url());
    // Loads the scripts so the faults below hit EVALSHA.
    const std::string warm_name = key("warm");
    Semaphore warm(*via_proxy_, warm_name, 1, {.ttl = std::chrono::seconds(5)});
    ASSERT_TRUE(warm.try_acquire());
    Semaphore warm_waiter(*via_proxy_, warm_name, 1, {.ttl = std::chrono::seconds(5)});
    ASSERT_FALSE(warm_waiter.try_acquire_for(std::chrono::milliseconds(20)));
    warm.release_or_throw();
  }
  FaultProxy& proxy() { return *proxy_; }
  Client& via_proxy() { return *via_proxy_; }

  std::unique_ptr<FaultProxy> proxy_;
  std::unique_ptr<Client> via_proxy_;
};

// Joined by the destructor; every body is bounded by its own timeouts.
class Crew {
 public:
  template <class F>
  void run(int n, F body) {
    for (int i = 0; i < n; ++i)
      threads_.emplace_back([this, body, i] {
        try {
          body(i);
        } catch (const std::exception& error) {
          const std::lock_guard guard(mutex_);
          errors_ += "thread " + std::to_string(i) + ": " + error.what() + "\n";
        }
      });
  }
  void join() {
    for (auto& thread : threads_)
      if (thread.joinable()) thread.join();
  }
  std::string errors() {
    const std::lock_guard guard(mutex_);
    return errors_;
  }
  ~Crew() { join(); }

 private:
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::string errors_;
};

// Raises `peak` to `value` if larger.
template <class T>
void raise_peak(std::atomic<T>& peak, T value) {
  T seen = peak.load();
  while (value > seen && !peak.compare_exchange_weak(seen, value)) {
  }
}

}  // namespace lockon::test
