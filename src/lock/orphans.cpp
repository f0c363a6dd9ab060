#include "lock/orphans.hpp"

#include "client/routed.hpp"

#include <openssl/crypto.h>

#include <algorithm>
#include <array>

#include "client/client_impl.hpp"
#include "lock/lock_scripts.hpp"
#include "client/script.hpp"

namespace lockon::detail {

Orphans& Orphans::instance() {
  // OpenSSL is initialised on the caller's thread first (see Watchdog::instance()).
  static const int openssl_ready = OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CONFIG, nullptr);
  (void)openssl_ready;
  static Orphans orphans;
  return orphans;
}

Orphans::Orphans() : state_([] { return std::make_unique<State>(); }) {}

Orphans::~Orphans() {
  State* current = state_.here();
  if (current == nullptr) return;  // a forked child that never adopted anything
  {
    std::lock_guard lock(current->mutex);
    current->stopping = true;
  }
  current->changed.notify_all();
  if (current->thread.joinable()) current->thread.join();
}

void Orphans::adopt(Orphan orphan) noexcept {
  try {
    State& s = state();
    const auto now = Clock::now();
    const int sweeps = orphan.unknown_outcome ? 2 : 1;
    {
      std::lock_guard lock(s.mutex);
      if (s.stopping) return;
      s.jobs.push_back(Job{std::move(orphan), now + kFirstRetry, now + kGiveUpAfter, kFirstRetry, sweeps});
      if (!s.thread.joinable()) s.thread = std::thread([&s] { run(s); });
    }
    s.changed.notify_all();
  } catch (...) {
    // Out of memory or no thread: the entry and key expire by their TTLs.
  }
}

std::size_t Orphans::pending() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.jobs.size();
}

bool Orphans::clean(const Orphan& orphan) noexcept {
  try {
    if (orphan.clean) return orphan.clean();
    const auto keys = key_views(orphan.keys);
    const std::array<std::string_view, 1> args{orphan.entry};
    ReplyPtr reply = routed_call(*orphan.client, orphan.keys[0], std::chrono::steady_clock::time_point::max(),
                                 [&](Connection& connection, Node&) {
                                   return eval(connection, scripts::cancel_wait(sharded_wake(*orphan.client)), keys, args,
                                               "clean up an abandoned wait");
                                 });
    return reply && reply->type == REDIS_REPLY_INTEGER;
  } catch (...) {
    return false;
  }
}

void Orphans::run(State& s) {
  std::unique_lock lock(s.mutex);
  while (!s.stopping) {
    const auto now = Clock::now();
    auto due = std::find_if(s.jobs.begin(), s.jobs.end(), [&](const Job& job) { return job.due <= now; });
    if (due == s.jobs.end()) {
      auto next = Clock::time_point::max();
      for (const Job& job : s.jobs) next = std::min(next, job.due);
      if (next == Clock::time_point::max()) s.changed.wait(lock);
      else s.changed.wait_until(lock, next);
      continue;
    }
    Job job = std::move(*due);
    s.jobs.erase(due);
    // The I/O runs without the mutex: adopt() never waits behind a server.
    lock.unlock();
    const bool cleaned = clean(job.orphan);
    const auto after = Clock::now();
    lock.lock();
    if (cleaned) {
      if (--job.sweeps_left > 0) {
        job.due = after + kSecondSweep;
        s.jobs.push_back(std::move(job));
      }
      continue;
    }
    if (after >= job.give_up_at) continue;
    job.interval = std::min(job.interval * 2, kMaxRetryInterval);
    job.due = after + job.interval;
    s.jobs.push_back(std::move(job));
  }
}

}  // namespace lockon::detail
