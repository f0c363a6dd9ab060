// Automatic pipelining for the blocking front (issue 18, target 3): many
// threads share one Connection; requests that arrive while others are in
// flight are queued and written together, replies are read in order and
// handed to their waiting threads.
//
// Who does the I/O (the connection has one owner at a time, changed under
// the mutex):
// - idle: a caller that finds the connection idle does its own exchange on
//   it (no queue, no other thread, no wake-up: the uncontended cycle costs
//   what a pooled connection costs);
// - callers arriving meanwhile queue their request and sleep on their own
//   completion word (a futex: the waker needs no lock, and wakes only a
//   caller that is really asleep);
// - when the caller doing its own exchange is done and requests are queued,
//   it hands the connection to the pipeline's I/O thread (started on first
//   need) and returns to its own work. The I/O thread writes everything
//   queued in one write, reads the replies (one blocking read, then every
//   reply already buffered), writes what was queued meanwhile, then
//   completes the round's requests: it wakes the first sleeping caller, and
//   each woken caller wakes the next (a chain). It goes idle when nothing is
//   queued or in flight.
// Measured with 64 threads (docs/benchmarks.md), per lock cycle: a caller
// leading each batch (leader/follower) cost ~6 context switches and ~10
// futex calls, most of them hand-overs and wakes under the mutex; the I/O
// thread waking every caller itself was preempted by nearly each of them
// (~1 involuntary switch per cycle) while the server waited; with the chain,
// ~2.3 switches (one sleep per call) and 4 futex calls.
//
// Correctness:
// - replies are matched to requests strictly in order (one connection, a
//   FIFO of requests in flight);
// - a request whose deadline passes while its reply is owed fails alone
//   (also a caller's own exchange on an idle connection: its owed replies
//   go to the I/O thread, which reads and drops them)
//   with TimeoutError (outcome unknown) at its deadline; it stays in the
//   FIFO as a detached slot whose replies are read and dropped when they
//   come, so the connection and the other callers' requests go on (as
//   Lettuce and ioredis do; one caller's try_lock_for(1ms) must not fail
//   its neighbours' unlock()). The socket timeout bounds how long replies
//   may stay owed without one arriving: past it (or when any I/O fails,
//   or more than kMaxDetachedReplies are owed to nobody) the connection is
//   broken and closed and every request in flight fails with the typed
//   error (outcome unknown): no later reply can reach the wrong request.
//   Requests still
//   queued (never written) whose deadline passes fail with TimeoutError and
//   are certainly not run (the waiter removes itself from the queue under
//   the mutex, so the writer can never take it afterwards);
// - a caller's commands are written adjacently in one batch (call_many), so
//   MULTI/EXEC and SET+WAIT stay contiguous; an EVALSHA's NOSCRIPT fallback
//   is a second, independent call. Pub/sub and WATCH never come here.
// - fork: a Pipeline lives in a Node, which the ClientImpl re-creates in a
//   forked child (common/fork.hpp), so a child never touches the parent's
//   (nor its I/O thread, which does not exist there).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "client/connection.hpp"
#include "client/hiredis_handles.hpp"
#include "lockon/options.hpp"

namespace lockon::detail {

class Pipeline {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Pipeline(ConnectionOptions options);
  /// Stops the I/O thread (no call may be running).
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  /// Sends one command on the shared connection and waits for its reply
  /// until `deadline` (Clock::time_point::max(): the socket timeout bounds
  /// each read). Error replies are returned. Throws ConnectError (not sent),
  /// TimeoutError / other IoError (outcome unknown unless ConnectError).
  ReplyPtr call(std::span<const std::string_view> args, Clock::time_point deadline, std::string_view operation);

  /// Several commands written adjacently in one batch (never interleaved
  /// with other callers': a MULTI/EXEC stays contiguous), their replies in
  /// order. Same errors as call().
  std::vector<ReplyPtr> call_many(std::span<const std::span<const std::string_view>> commands,
                                  Clock::time_point deadline, std::string_view operation);

  /// Counters for tests and benchmarks: writes, requests, and the writes
  /// made by the I/O thread (the others were a caller's own exchange).
  std::uint64_t batches() const noexcept { return batches_.load(std::memory_order_relaxed); }
  std::uint64_t requests() const noexcept { return requests_.load(std::memory_order_relaxed); }
  std::uint64_t io_thread_batches() const noexcept { return io_batches_.load(std::memory_order_relaxed); }
  /// Reads that found their reply while polling (ConnectionOptions::reply_spin).
  std::uint64_t replies_seen_polling() const noexcept { return seen_polling_.load(std::memory_order_relaxed); }

 private:
  struct Request;
  enum class Owner { idle, caller, io_thread };
  // A written request whose replies are owed, in order. `request` null:
  // its caller gave up (deadline); its `owed` remaining replies are dropped.
  struct InFlight {
    Request* request;
    std::size_t owed;
  };
  // Replies owed to detached requests beyond which the connection is
  // dropped instead (a server that stopped answering while callers with
  // short deadlines keep coming).
  static constexpr std::size_t kMaxDetachedReplies = 4096;

  // Runs `request` to completion (its error or replies set; never throws).
  void execute(Request& request);
  // The caller's own exchange on an idle connection.
  void exchange(Request& request) noexcept;
  // The caller's own exchange gave up on its last `owed` replies (its
  // deadline): they become a detached slot for the next owner.
  void leave_owed(std::size_t owed, Clock::time_point written_at) noexcept;
  // Called by the caller that owned the connection, with `lock` held: gives
  // the connection to the I/O thread if requests are queued or replies are
  // owed, else idles it.
  void hand_over(std::unique_lock<std::mutex>& lock);
  void io_loop();
  // Owner's work until nothing is queued or in flight; `lock` held on entry
  // and exit, released around I/O.
  void drain(std::unique_lock<std::mutex>& lock, bool on_io_thread);
  // Writes batch_ in one write; moves it to in_flight_ (or fails it).
  void write_batch() noexcept;
  // One blocking read, then every reply already buffered.
  void read_replies() noexcept;
  // Polls for a reply for up to reply_spin before read_replies sleeps.
  void poll_before_sleeping(Clock::time_point deadline) noexcept;
  // Completes the requests read_replies finished and wakes their callers.
  void wake_completed() noexcept;
  // Fails every request in flight with `error` (connection already broken).
  void fail_in_flight(const std::exception_ptr& error) noexcept;
  // Fails the requests in flight whose deadline passed and detaches them.
  void detach_expired() noexcept;
  // The earliest deadline of the requests in flight (detached ones aside).
  Clock::time_point earliest_in_flight_deadline() const noexcept;

  std::mutex mutex_;
  std::condition_variable io_wake_;  // the I/O thread waits for Owner::io_thread or stop_
  std::deque<Request*> queued_;      // not written yet (guarded by mutex_)
  Owner owner_ = Owner::idle;        // guarded by mutex_
  bool stop_ = false;                // guarded by mutex_
  // Touched only by the owner of the connection:
  Connection connection_;
  std::deque<InFlight> in_flight_;  // written, replies owed in this order
  std::size_t detached_owed_ = 0;   // replies owed to detached requests
  Clock::time_point last_progress_{};  // last reply read, or first write with none owed
  std::vector<Request*> batch_;
  std::vector<Request*> completed_;  // replies in, not marked done yet (see wake_completed)
  std::atomic<std::uint64_t> batches_{0};
  std::atomic<std::uint64_t> requests_{0};
  std::atomic<std::uint64_t> io_batches_{0};
  std::atomic<std::uint64_t> seen_polling_{0};
  std::thread io_;  // started on the first hand-over (guarded by mutex_)
};

}  // namespace lockon::detail
