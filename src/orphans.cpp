#include "orphans.hpp"

#include <algorithm>
#include <array>

#include "client_impl.hpp"
#include "lock_scripts.hpp"
#include "script.hpp"

namespace lockon::detail {

Orphans& Orphans::instance() {
  static Orphans orphans;
  return orphans;
}

Orphans::~Orphans() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Orphans::adopt(Orphan orphan) noexcept {
  try {
    const auto now = Clock::now();
    const int sweeps = orphan.unknown_outcome ? 2 : 1;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      jobs_.push_back(Job{std::move(orphan), now + kFirstRetry, now + kGiveUpAfter, kFirstRetry, sweeps});
      if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    }
    changed_.notify_all();
  } catch (...) {
    // Out of memory or no thread: the entry and key expire by their TTLs.
  }
}

std::size_t Orphans::pending() const {
  std::lock_guard lock(mutex_);
  return jobs_.size();
}

bool Orphans::clean(const Orphan& orphan) noexcept {
  try {
    const std::array<std::string_view, 4> keys{orphan.name, orphan.queue_key, orphan.fence_key, orphan.record_key};
    const std::array<std::string_view, 1> args{orphan.entry};
    auto connection = orphan.client->pool().borrow();
    ReplyPtr reply = eval(*connection, scripts::cancel_wait(), keys, args, "clean up an abandoned wait");
    return reply && reply->type == REDIS_REPLY_INTEGER;
  } catch (...) {
    return false;
  }
}

void Orphans::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const auto now = Clock::now();
    auto due = std::find_if(jobs_.begin(), jobs_.end(), [&](const Job& job) { return job.due <= now; });
    if (due == jobs_.end()) {
      auto next = Clock::time_point::max();
      for (const Job& job : jobs_) next = std::min(next, job.due);
      if (next == Clock::time_point::max()) changed_.wait(lock);
      else changed_.wait_until(lock, next);
      continue;
    }
    Job job = std::move(*due);
    jobs_.erase(due);
    // The I/O runs without the mutex: adopt() never waits behind a server.
    lock.unlock();
    const bool cleaned = clean(job.orphan);
    const auto after = Clock::now();
    lock.lock();
    if (cleaned) {
      if (--job.sweeps_left > 0) {
        job.due = after + kSecondSweep;
        jobs_.push_back(std::move(job));
      }
      continue;
    }
    if (after >= job.give_up_at) continue;
    job.interval = std::min(job.interval * 2, kMaxRetryInterval);
    job.due = after + job.interval;
    jobs_.push_back(std::move(job));
  }
}

}  // namespace lockon::detail
