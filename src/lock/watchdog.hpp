// The process-wide renewal threads: one "lane" per server (and one for
// locks that renew themselves, i.e. Redlock), created on demand and ended
// when idle.
//
// Each acquisition registers a RenewalEntry. A lane renews its entries every
// ttl/3; entries that fall due together are renewed in a single pipeline. A
// renewal never runs after stop(): stop() takes the entry's mutex, which the
// lane holds for the whole renewal round trip, so once stop() returns no
// renewal is in flight and none will start (the bug to avoid: a renewal
// racing unlock and keeping a released lock alive).
//
// A lease that is not renewed (auto_renew off) registers too, with
// `renews` false: its lane only watches the lease's end and declares the
// loss when it passes, so the stop token and on_lost fire as for a renewed
// lease that ran out (until session 21 only lost() turned true, for whoever
// polled it). Those entries have a lane of their own, which never does I/O.
//
// Two rules learnt the hard way:
// - Loss callbacks (on_lost, stop callbacks) run after the round released
//   every entry mutex: a callback that unlocks another lock renewed in the
//   same round used to deadlock the renewal thread for good.
// - A server that does not answer holds up only its own lane: renewals and
//   unlocks of locks on other servers never wait behind it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/fork.hpp"
#include "protocol/lease.hpp"
#include "protocol/renewal.hpp"

namespace lockon::detail {

class ClientImpl;

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
  /// With `renew`: the lane to run on (a server's name, so a stalled server
  /// holds up only its own entries); empty: the lane of self-renewing entries.
  std::string lane;
  /// False: a lease that is not renewed. Nothing is sent; once the end the
  /// lease can prove (signal->lease_end(), which extend() moves) has passed,
  /// the loss is declared. Made by Watchdog::watch_lease_end().
  bool renews = true;

  // Schedule (guarded by mutex).
  std::mutex mutex;
  bool active = true;
  Clock::time_point next_due;
  Clock::time_point lease_expires;  // send time of the last confirmed renewal + ttl
  Clock::time_point hold_deadline = Clock::time_point::max();
  /// fork_generation() when added: a forked child never touches the
  /// parent's entries (their mutexes may be frozen locked).
  std::uint64_t generation = 0;
};

class Watchdog {
 public:
  static Watchdog& instance();

  /// Starts renewing `entry` (its schedule fields must be set) on the lane
  /// of its server.
  void add(std::shared_ptr<RenewalEntry> entry);

  /// Watches the end of a lease that is not renewed (see
  /// RenewalEntry::renews) and declares it lost once the end has passed.
  /// The lease's owner must stop() the entry at release, as a renewal's, and
  /// watch again after moving the end earlier (a shorter extend()).
  std::shared_ptr<RenewalEntry> watch_lease_end(std::string name, std::shared_ptr<LeaseSignal> signal);

  /// Stops renewing; blocks while a renewal of this entry is in flight.
  /// In a forked child, entries of the parent are left alone.
  static void stop(RenewalEntry& entry) noexcept;

  ~Watchdog();

 private:
  class Lane;
  // Per process image (see fork.hpp): lanes by server endpoint ("" for
  // self-renewing entries).
  struct Lanes {
    std::mutex mutex;
    std::map<std::string, std::shared_ptr<Lane>> by_server;
  };

  Watchdog();
  Lanes& lanes() { return lanes_.get([] { return std::make_unique<Lanes>(); }); }

  ForkLocal<Lanes> lanes_;
};

}  // namespace lockon::detail
