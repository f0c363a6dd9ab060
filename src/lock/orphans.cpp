#include "lock/orphans.hpp"

#include <openssl/crypto.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <utility>

#include "client/client_impl.hpp"
#include "protocol/lock_scripts.hpp"
#include "client/script.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {

Orphans& Orphans::instance() {
  // OpenSSL is initialised on the caller's thread first (see Watchdog::instance()).
  static const int openssl_ready = OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CONFIG, nullptr);
  (void)openssl_ready;
  static Orphans orphans;
  return orphans;
}

Orphans::Orphans()
    : locks_([] { return std::make_unique<State>(); }), others_([] { return std::make_unique<State>(); }) {}

Orphans::~Orphans() {
  for (State* current : {locks_.here(), others_.here()}) {
    if (current == nullptr) continue;  // a forked child that never adopted anything
    {
      std::lock_guard lock(current->mutex);
      current->stopping = true;
    }
    current->changed.notify_all();
    if (current->thread.joinable()) current->thread.join();
  }
}

void Orphans::adopt(Orphan orphan) noexcept {
  try {
    State& s = orphan.clean ? others() : locks();
    const auto now = Clock::now();
    CleanupSchedule schedule(orphan.unknown_outcome, now);
    {
      std::lock_guard lock(s.mutex);
      if (s.stopping) return;
      s.jobs.push_back(Job{std::move(orphan), CleanupSchedule::first_due(now), schedule});
      if (!s.thread.joinable()) s.thread = std::thread([&s] { run(s); });
    }
    s.changed.notify_all();
  } catch (...) {
    // Out of memory or no thread: the entry and key expire by their TTLs.
  }
}

bool Orphans::forget(const ClientImpl& client, const std::string& key, const std::string& token,
                     Clock::time_point deadline) {
  if (token.empty()) return true;
  // A try_lock (no deadline) still waits for a clean-up in flight, briefly:
  // it usually ends within a round trip.
  deadline = std::max(deadline, Clock::now() + kForgetGrace);
  // Whichever Client object filed them: a Lock on another Client object
  // with the same token and key was released by them (found by review,
  // session 18), and the same server may be reached by another address.
  // Those filed for this Client's endpoint must run first (or the
  // acquisition fails); those of another endpoint get a short try and are
  // otherwise left to the background: another server's health must not
  // decide this acquisition (a shard with the same key names).
  const std::string& server = client.endpoint();
  const std::tuple<std::string, std::string, std::string> id{server, key, token};
  const auto matches = [&](const Job& job) { return job.orphan.token == token && job.orphan.keys[0] == key; };
  std::vector<Job> now;
  bool in_time = true;
  for (State* s : {&locks(), &others()}) {
    std::unique_lock lock(s->mutex);
    while (true) {
      // Queued ones, and those a lane filed again while we waited.
      for (auto it = s->jobs.begin(); it != s->jobs.end();) {
        if (!matches(*it)) {
          ++it;
          continue;
        }
        now.push_back(std::move(*it));
        it = s->jobs.erase(it);
      }
      if (s->in_flight_tokens.count(id) == 0) break;
      // A lane runs one: its I/O ends within the socket timeouts.
      if (deadline == Clock::time_point::max()) {
        s->changed.wait(lock);
      } else if (s->changed.wait_until(lock, deadline) == std::cv_status::timeout &&
                 s->in_flight_tokens.count(id) != 0) {
        in_time = false;
        break;
      }
    }
    if (!in_time) break;
  }
  if (!in_time) {
    for (Job& job : now) adopt(std::move(job.orphan));  // not run: retried in the background
    return false;
  }
  // Run now, once, on this thread, within the deadline: what an earlier
  // attempt may have won is released before the new one starts; none of
  // them runs after it.
  std::vector<Job> elsewhere;
  for (auto it = now.begin(); it != now.end();) {
    if (it->orphan.client->endpoint() == server) {
      ++it;
    } else {
      elsewhere.push_back(std::move(*it));
      it = now.erase(it);
    }
  }
  const std::vector<char> cleaned = clean(now, deadline);
  bool all_cleaned = true;
  for (std::size_t i = 0; i < now.size(); ++i) {
    if (cleaned[i] != 0) continue;
    all_cleaned = false;
    adopt(std::move(now[i].orphan));  // retried in the background as before
  }
  const std::vector<char> cleaned_elsewhere =
      clean(elsewhere, std::min(deadline, Clock::now() + kElsewhereGrace));
  for (std::size_t i = 0; i < elsewhere.size(); ++i)
    if (cleaned_elsewhere[i] == 0) adopt(std::move(elsewhere[i].orphan));
  if (all_cleaned) return in_time;
  // Not by the deadline: "not acquired in time". Otherwise the server did
  // not answer (or refused): the acquisition must not look merely busy
  // (lock() would return without the lock; found by review, session 17).
  if (deadline != Clock::time_point::max() && Clock::now() >= deadline) return false;
  throw ConnectError("acquire '" + key +
                     "': an earlier attempt with this custom token could not be cleaned up first (server unreachable "
                     "or refusing); not acquired");
}

std::size_t Orphans::peak_lanes() {
  State& s = locks();
  std::lock_guard lock(s.mutex);
  return s.peak_lanes;
}

std::size_t Orphans::pending() {
  std::size_t total = 0;
  for (State* s : {&locks(), &others()}) {
    std::lock_guard lock(s->mutex);
    for (const Job& job : s->jobs) total += job.schedule.cleaned_once() ? 0 : 1;
    total += s->in_flight_unswept;
  }
  return total;
}

namespace {

// Cleans the standard orphans `which` of `jobs`, all served by `node` of
// `client`, in one pipeline: a stall leaves thousands of abandoned
// attempts, and one round trip each kept their keys held for seconds under
// load (AutoPipelineAttack's orphan test: ~2,000 per 300 ms of 2 ms
// attempts). An error reply (MOVED after a slot moved, READONLY after a
// failover) teaches the topology and leaves that orphan for its retry.
template <class Job>
void clean_on_node(ClientImpl& client, Node& node, std::vector<Job>& jobs, const std::vector<std::size_t>& which,
                   std::vector<char>& cleaned, Orphans::Clock::time_point deadline) noexcept {
  try {
    // The calls' spans point into these (reserved: never reallocated).
    std::vector<std::array<std::string_view, kLockScriptKeys>> keys;
    std::vector<std::array<std::string_view, 1>> args;
    std::vector<ScriptCall> calls;
    keys.reserve(which.size());
    args.reserve(which.size());
    calls.reserve(which.size());
    for (const std::size_t i : which) {
      keys.push_back(key_views(jobs[i].orphan.keys));
      args.push_back({jobs[i].orphan.entry});
      calls.push_back({keys.back(), args.back()});
    }
    auto lease = node.pool().borrow_by(deadline);
    if (!lease) return;  // the deadline passed: nothing was sent
    Connection& connection = **lease;
    if (!connection.ensure_connected_by(deadline)) return;
    // Bounded by `deadline` (forget(): a caller's acquisition waits on it).
    const bool bounded = deadline != Orphans::Clock::time_point::max();
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Orphans::Clock::now());
    if (bounded && left.count() <= 0) return;
    const auto socket_timeout = connection.options().socket_timeout;
    if (socket_timeout.count() > 0) left = std::min(left, socket_timeout);
    const Connection::ScopedTimeout within(bounded ? &connection : nullptr, left);
    const std::vector<ReplyPtr> replies =
        eval_pipelined(connection, scripts::cancel_wait(sharded_wake(client)), calls, "clean up an abandoned wait");
    for (std::size_t n = 0; n < which.size(); ++n) {
      const redisReply& reply = *replies[n];
      if (reply.type == REDIS_REPLY_INTEGER) cleaned[which[n]] = 1;
      else if (reply.type == REDIS_REPLY_ERROR) client.topology().report_error_reply(node, {reply.str, reply.len});
    }
  } catch (const IoError&) {
    client.topology().report_io_failure(node);
  } catch (...) {
    // Every orphan of this batch is retried.
  }
}

}  // namespace

std::vector<char> Orphans::clean(std::vector<Job>& jobs, Clock::time_point deadline) noexcept {
  std::vector<char> cleaned(jobs.size(), 0);
  try {
    std::map<std::pair<ClientImpl*, std::shared_ptr<Node>>, std::vector<std::size_t>> by_node;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const Orphan& orphan = jobs[i].orphan;
      if (orphan.clean) continue;
      try {
        by_node[{orphan.client.get(), orphan.client->node_for(orphan.keys[0])}].push_back(i);
      } catch (...) {
        // No node for it now (cluster map unreadable, no master): retried.
      }
    }
    for (const auto& [where, which] : by_node)
      clean_on_node(*where.first, *where.second, jobs, which, cleaned, deadline);
    // The other clean-ups (a Redlock's, a Semaphore's; their own queue) one
    // by one.
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      if (!jobs[i].orphan.clean) continue;
      try {
        cleaned[i] = jobs[i].orphan.clean(deadline) ? 1 : 0;
      } catch (...) {
        // Retried.
      }
    }
  } catch (...) {
    // Out of memory: whatever was not cleaned is retried.
  }
  return cleaned;
}

void Orphans::run(State& s) {
  std::unique_lock lock(s.mutex);
  while (true) {
    // Lanes that ended: joined (each ends right after saying so).
    for (const std::thread::id done : s.lanes_done) {
      const auto it = std::find_if(s.lanes.begin(), s.lanes.end(), [&](const std::thread& t) { return t.get_id() == done; });
      if (it == s.lanes.end()) continue;
      it->join();
      s.lanes.erase(it);
    }
    s.lanes_done.clear();
    if (s.stopping) break;
    const auto now = Clock::now();
    // The due jobs of clients without a lane at work leave the queue in one
    // pass (up to kBatch per client); the others keep their order.
    std::map<const ClientImpl*, std::vector<Job>> due;
    auto next = Clock::time_point::max();
    auto kept = s.jobs.begin();
    for (auto it = s.jobs.begin(); it != s.jobs.end(); ++it) {
      const ClientImpl* client = it->orphan.client.get();
      const bool idle = s.busy.count(client) == 0;
      // A client gets a lane while there is one to spare.
      if (idle && it->due <= now && (due.count(client) != 0 || s.busy.size() + due.size() < kMaxLanes)) {
        std::vector<Job>& batch = due[client];
        if (batch.size() < kBatch) {
          batch.push_back(std::move(*it));
          continue;
        }
      }
      // Due but not taken (its client's lane at work, no lane to spare, or
      // its batch full): a lane's end wakes us. Not due: its time does.
      if (it->due > now) next = std::min(next, it->due);
      if (kept != it) *kept = std::move(*it);
      ++kept;
    }
    s.jobs.erase(kept, s.jobs.end());
    for (auto& [client, batch] : due) {
      // Counted before the lane starts: it moves the jobs out at once.
      const std::size_t count = batch.size();
      const auto unswept = static_cast<std::size_t>(
          std::count_if(batch.begin(), batch.end(), [](const Job& job) { return !job.schedule.cleaned_once(); }));
      std::vector<std::tuple<std::string, std::string, std::string>> tokens;
      for (const Job& job : batch)
        if (!job.orphan.token.empty())
          tokens.emplace_back(job.orphan.client->endpoint(), job.orphan.keys[0], job.orphan.token);
      auto jobs = std::make_shared<std::vector<Job>>(std::move(batch));
      bool started = false;
      try {
        s.busy.insert(client);
        s.lanes.emplace_back([&s, client = client, jobs] { work(s, client, std::move(*jobs)); });
        started = true;
      } catch (...) {
        // No thread (or no memory); nothing started: the jobs wait for a later round.
        s.busy.erase(client);
      }
      if (started) {
        s.in_flight += count;
        s.in_flight_unswept += unswept;
        s.in_flight_tokens.insert(tokens.begin(), tokens.end());
        s.peak_lanes = std::max(s.peak_lanes, s.busy.size());
        continue;
      }
      for (Job& job : *jobs) {
        job.due = now + CleanupSchedule::kMaxRetryInterval;
        s.jobs.push_back(std::move(job));
      }
    }
    if (!due.empty()) continue;  // new lanes: look again (their jobs are gone)
    if (next == Clock::time_point::max()) s.changed.wait(lock);
    else s.changed.wait_until(lock, next);
  }
  // Stopping: the lanes end after their I/O (bounded by the socket timeouts).
  std::vector<std::thread> lanes = std::move(s.lanes);
  lock.unlock();
  for (std::thread& lane : lanes) lane.join();
}

void Orphans::work(State& s, const ClientImpl* client, std::vector<Job> jobs) noexcept {
  // The I/O runs without the mutex: adopt() never waits behind a server.
  const std::vector<char> cleaned = clean(jobs, Clock::time_point::max());
  const auto after = Clock::now();
  {
    std::lock_guard lock(s.mutex);
    s.in_flight_unswept -= static_cast<std::size_t>(
        std::count_if(jobs.begin(), jobs.end(), [](const Job& job) { return !job.schedule.cleaned_once(); }));
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      Job& job = jobs[i];
      if (!job.orphan.token.empty()) {
        const auto it = s.in_flight_tokens.find(std::tuple(job.orphan.client->endpoint(), job.orphan.keys[0], job.orphan.token));
        if (it != s.in_flight_tokens.end()) s.in_flight_tokens.erase(it);
      }
      const auto due = job.schedule.after_run(cleaned[i] != 0, after);
      if (!due) continue;
      job.due = *due;
      s.jobs.push_back(std::move(job));
    }
    s.in_flight -= jobs.size();
    s.busy.erase(client);
    try {
      s.lanes_done.push_back(std::this_thread::get_id());
    } catch (...) {
      // No memory: this lane is joined when the queue stops instead.
    }
  }
  s.changed.notify_all();
}

}  // namespace lockon::detail
