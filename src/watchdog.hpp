// The process-wide renewal thread (one thread for every auto-renewed lock).
//
// Each acquisition registers a RenewalEntry. The thread renews every entry at
// ttl/3; entries on the same server that fall due together are renewed in a
// single pipeline. A renewal never runs after stop(): stop() takes the
// entry's mutex, which the thread holds for the whole renewal round trip, so
// once stop() returns no renewal is in flight and none will start (the bug
// to avoid: a renewal racing unlock and keeping a released lock alive).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lease.hpp"

namespace lockon::detail {

class ClientImpl;

enum class RenewResult { renewed, not_owned, io_error };

struct RenewalEntry {
  using Clock = std::chrono::steady_clock;

  // Identity and what to renew.
  std::string name;
  std::chrono::milliseconds ttl{0};
  std::shared_ptr<LeaseSignal> signal;
  /// Single-instance locks: renewed in per-server pipelines.
  std::shared_ptr<ClientImpl> client;
  std::string token;
  /// Other kinds (Redlock): renews one lease; must not throw.
  std::function<RenewResult()> renew;

  // Schedule (guarded by mutex).
  std::mutex mutex;
  bool active = true;
  Clock::time_point next_due;
  Clock::time_point lease_expires;  // send time of the last confirmed renewal + ttl
  Clock::time_point hold_deadline = Clock::time_point::max();
};

class Watchdog {
 public:
  static Watchdog& instance();

  /// Starts renewing `entry` (its schedule fields must be set).
  void add(std::shared_ptr<RenewalEntry> entry);

  /// Stops renewing; blocks while a renewal of this entry is in flight.
  static void stop(RenewalEntry& entry) noexcept;

  ~Watchdog();

 private:
  Watchdog() = default;
  void run();
  void renew_due(std::vector<std::shared_ptr<RenewalEntry>>& due);

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::shared_ptr<RenewalEntry>> entries_;
  // When the thread will next look at the entries by itself. add() wakes it
  // only for an entry due earlier, so a lock/unlock loop costs no thread
  // wake-up per acquisition.
  RenewalEntry::Clock::time_point planned_wake_ = RenewalEntry::Clock::time_point::min();
  // add() drops stopped entries once the vector reaches this size.
  std::size_t compact_at_ = 256;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace lockon::detail
