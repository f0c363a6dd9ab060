// protocol/cleanup_schedule.hpp — when the clean-up of an abandoned attempt
// runs, for both fronts (the blocking Orphans queue, lock/orphans.hpp, and
// the Asio front's run_cleanup, async/async_client.cpp). No I/O.
//
// An attempt whose outcome the caller never learnt (a timeout, a lost
// reply, a cancelled waiter) leaves a queue entry or a granted key behind.
// Its clean-up (the cancel script) is retried at growing intervals until it
// runs: a stall costs at most kMaxRetryInterval after the server is back.
// A request sent before a stall can still run after the clean-up (a server
// serves its connections in no guaranteed order; a proxy or TCP
// retransmissions hold a request back for seconds), so an attempt of an
// unknown outcome is cleaned again at kSweepsAfterSuccess after the first
// success. Past kGiveUpAfter the queue entry has expired by the queue's TTL
// anyway, and a failing clean-up is dropped.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <optional>

namespace lockon::detail {

class CleanupSchedule {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kFirstRetry{20};
  static constexpr std::chrono::milliseconds kMaxRetryInterval{250};
  /// Offsets from the first success. Its request, stuck behind a stall,
  /// most likely runs just after the server resumes (50 ms); one held back
  /// in a proxy or by TCP retransmissions (0.2 + 0.4 + ... s) can run
  /// seconds later (an entry queued 3 s late kept K for its lease when the
  /// sweeps ended at 1 s). Not longer: a kept clean-up holds its client (a
  /// 30 s sweep cost half a core at 1,000 orphans/s).
  static constexpr std::array<std::chrono::milliseconds, 3> kSweepsAfterSuccess{
      std::chrono::milliseconds(50), std::chrono::milliseconds(1000), std::chrono::milliseconds(5000)};
  static constexpr std::chrono::minutes kGiveUpAfter{10};

  /// A clean-up adopted at `now`; `outcome_unknown`: the attempt's request
  /// may still run later (it is swept after its first success).
  CleanupSchedule(bool outcome_unknown, Clock::time_point now) noexcept
      : give_up_at_(now + kGiveUpAfter), sweeps_left_(outcome_unknown ? kSweepsAfterSuccess.size() : 0) {}

  /// When the first run is due.
  static Clock::time_point first_due(Clock::time_point now) noexcept { return now + kFirstRetry; }

  /// A run ended at `now`, and `cleaned` says whether the script ran. When
  /// the next run is due; nullopt: nothing more to do (cleaned with no
  /// sweep left, or given up).
  std::optional<Clock::time_point> after_run(bool cleaned, Clock::time_point now) noexcept {
    if (cleaned) {
      if (sweeps_left_ == 0) return std::nullopt;
      const std::size_t next = kSweepsAfterSuccess.size() - sweeps_left_;
      --sweeps_left_;
      cleaned_once_ = true;
      interval_ = kFirstRetry;  // a failing sweep is retried as a first run
      return now + (next == 0 ? kSweepsAfterSuccess[0] : kSweepsAfterSuccess[next] - kSweepsAfterSuccess[next - 1]);
    }
    if (now >= give_up_at_) return std::nullopt;
    interval_ = interval_ * 2 < kMaxRetryInterval ? interval_ * 2 : kMaxRetryInterval;
    return now + interval_;
  }

  /// Whether the clean-up ran once already (later runs are sweeps).
  bool cleaned_once() const noexcept { return cleaned_once_; }

 private:
  Clock::time_point give_up_at_;
  std::size_t sweeps_left_;
  std::chrono::milliseconds interval_ = kFirstRetry;
  bool cleaned_once_ = false;
};

}  // namespace lockon::detail
