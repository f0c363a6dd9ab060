// Background clean-up of lock attempts whose outcome the caller never learnt.
//
// A waiter that gives up removes its queue entry (cancel_wait), and passes
// the lock on if a release handed it over meanwhile. When that cancel fails
// (a network blip, a stalled server at the waiter's deadline), the entry
// stays queued: if the process still listens on the key's wake channel
// (another thread waits on the same key, the normal case with lock_on),
// PUBLISH counts it alive and the key is handed to a token nobody holds, for
// a whole lease (forever with no_expiry). Likewise an acquisition whose
// reply was lost (timeout, dropped connection) may have been granted, or
// may be granted later when a stalled server resumes.
//
// Such "orphans" are adopted here: a background thread runs the cancel
// script (remove the entry; if the key holds the orphan's token, hand it to
// the next live waiter or delete it) until it succeeds, on the schedule of
// protocol/cleanup_schedule.hpp (shared with the Asio front): growing
// intervals, sweeps after the first success when the outcome is unknown.
// The due clean-ups go out together, one pipeline per server, so thousands
// of orphans left by a stall cost a few round trips, not one each; each
// client's on a thread of its own (a lane), so a partitioned server delays
// only its own.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/fork.hpp"
#include "protocol/cleanup_schedule.hpp"
#include "protocol/lock_scripts.hpp"

namespace lockon::detail {

class ClientImpl;

struct Orphan {
  std::shared_ptr<ClientImpl> client;
  LockScriptKeys keys;       // the lock key first (lock_script_keys())
  std::string entry;         // "<sid>|<waiter id>|<ttl>|<fenced>|<token>" (see lock_scripts.hpp)
  bool unknown_outcome = false;  // a request may still execute later: sweep three times
  /// The token the clean-up releases the key (or share) for: a later
  /// acquisition with the same custom token makes it forget the clean-up
  /// (forget()). Empty: never forgotten.
  std::string token{};
  /// When set, the clean-up to retry instead of the Lock's cancel script (a
  /// ReadWriteLock/Semaphore waiter's cancel): true once it succeeded. Its
  /// I/O ends by the time point given (forget(): a caller's deadline;
  /// time_point::max() in the background: its own bounds).
  std::function<bool(std::chrono::steady_clock::time_point)> clean{};
};

class Orphans {
 public:
  using Clock = std::chrono::steady_clock;
  /// At most this many clean-ups per round (one pipeline per server).
  static constexpr std::size_t kBatch = 256;
  /// At most this many lanes (threads) at work per queue: the clients
  /// beyond wait for a lane to end.
  static constexpr std::size_t kMaxLanes = 8;
  /// forget() waits at least this long for a clean-up in flight.
  static constexpr std::chrono::milliseconds kForgetGrace{25};
  /// forget() gives the clean-ups another endpoint filed this long at most
  /// (then leaves them to the background).
  static constexpr std::chrono::milliseconds kElsewhereGrace{100};

  static Orphans& instance();

  /// Takes over the clean-up (a Lock's cancel script, or `orphan.clean` on
  /// a queue of its own). Never blocks on I/O, never throws.
  void adopt(Orphan orphan) noexcept;

  /// A new acquisition of `key` with the custom token `token` by `client`
  /// begins: clean-ups of earlier attempts with that token release whatever
  /// holds the token, and must not run after it (they would release the new
  /// acquisition: two holders). Runs the queued ones now, once, on the
  /// calling thread (what an earlier attempt won is released first), after
  /// waiting for one a lane is running (until `deadline`, at least
  /// kForgetGrace; its I/O is bounded by the socket timeouts); none is
  /// swept again. Runs them within `deadline`. False when the deadline
  /// passed first (those not run are re-queued): the caller does not
  /// acquire, as if busy. Throws ConnectError when one could not be run for
  /// another reason (server unreachable or refusing; re-queued). Blocks
  /// only when there are such clean-ups. A clean-up request already on the
  /// wire may still run late (docs: custom tokens).
  bool forget(const ClientImpl& client, const std::string& key, const std::string& token, Clock::time_point deadline);

  /// Orphans not yet cleaned (for tests and diagnostics).
  std::size_t pending();
  /// The most lanes that were at work at once in the Lock queue (tests).
  std::size_t peak_lanes();

  ~Orphans();

 private:
  struct Job {
    Orphan orphan;
    Clock::time_point due;
    CleanupSchedule schedule;  // cleaned_once(): pending() no longer counts it
  };

  // Everything the threads share, per process: a child forked while they
  // ran (or while the mutex was held) starts from a fresh State and leaves
  // its copy of the parent's untouched (its threads do not exist there;
  // destroying it would wait for them forever).
  struct State {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<Job> jobs;      // waiting for their due time or their client's lane
    std::size_t in_flight = 0;  // jobs a lane is cleaning now
    std::size_t in_flight_unswept = 0;  // of those, not cleaned before (what pending() counts)
    // Of those, the ones forget() may ask about: server, key and token.
    std::multiset<std::tuple<std::string, std::string, std::string>> in_flight_tokens;
    // Clients with a lane at work: their other jobs wait, so a client's
    // clean-ups run one batch at a time, and a server that hangs (a
    // partition, a paused process) holds its own lane only.
    std::set<const ClientImpl*> busy;
    std::vector<std::thread> lanes;             // joined by the dispatcher
    std::vector<std::thread::id> lanes_done;  // lanes that ended, to join
    std::size_t peak_lanes = 0;
    bool stopping = false;
    std::thread thread;  // the dispatcher (run)
  };

  Orphans();
  // Two queues: a Lock's clean-ups (pipelined, quick) and the others (a
  // Redlock release retried on a paused node takes per_node_timeout per
  // attempt).
  State& locks() { return locks_.get([] { return std::make_unique<State>(); }); }
  State& others() { return others_.get([] { return std::make_unique<State>(); }); }
  // The dispatcher: hands each client's due jobs (up to kBatch) to a lane
  // thread of their own, and joins the lanes that ended.
  static void run(State& state);
  // One lane: cleans `jobs` (all of one client), then files them again or
  // drops them, and frees the client's lane.
  static void work(State& state, const ClientImpl* client, std::vector<Job> jobs) noexcept;
  // Runs each job's clean-up (standard ones pipelined per server); returns,
  // per job, whether it succeeded.
  // `deadline` bounds the standard clean-ups' I/O (forget(); max: the
  // socket timeouts).
  static std::vector<char> clean(std::vector<Job>& jobs, Clock::time_point deadline) noexcept;

  ForkLocal<State> locks_;
  ForkLocal<State> others_;
};

}  // namespace lockon::detail
