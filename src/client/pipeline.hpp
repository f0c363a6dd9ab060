// Automatic pipelining for the blocking front (issue 18, target 3): many
// threads share one Connection; requests that arrive while others are in
// flight are queued and written together, replies are read in order and
// handed to their waiting threads.
//
// Leader/follower, no I/O thread: the thread that finds no leader becomes
// it, writes everything queued in one write and reads replies for everyone
// (writing what was queued meanwhile between reads), until its own reply
// came and the batch in flight is read; then it hands leadership to the
// oldest waiting request. On two cores an I/O thread would add a wake-up per
// batch on top of the callers' (not measured against it yet).
//
// Correctness:
// - replies are matched to requests strictly in order (one connection, a
//   FIFO of requests in flight);
// - the leader reads with the earliest deadline of the requests in flight;
//   when it passes (or any I/O fails) the connection is broken and closed
//   and every request in flight on it fails with the typed error (outcome
//   unknown): no later reply can reach the wrong request. Requests still
//   queued (never written) whose deadline passes fail with TimeoutError and
//   are certainly not run;
// - a caller's commands are written adjacently in one batch (call_many), so
//   MULTI/EXEC and SET+WAIT stay contiguous; an EVALSHA's NOSCRIPT fallback
//   is a second, independent call. Pub/sub and WATCH never come here.
// - fork: a Pipeline lives in a Node, which the ClientImpl re-creates in a
//   forked child (common/fork.hpp), so a child never touches the parent's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "client/connection.hpp"
#include "client/hiredis_handles.hpp"
#include "lockon/options.hpp"

namespace lockon::detail {

class Pipeline {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Pipeline(ConnectionOptions options);
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

  /// Counters for tests and benchmarks.
  std::uint64_t batches() const;
  std::uint64_t requests() const;

 private:
  struct Request;
  // Leader work: writes the queue and reads until `own` is done. Called and
  // returns with `lock` held; releases it around I/O.
  void lead(std::unique_lock<std::mutex>& lock, Request& own);
  // Writes every queued request in one write (lock released around I/O).
  void send_queued(std::unique_lock<std::mutex>& lock);
  // Fails every request in flight with `error` (connection already broken).
  void fail_in_flight(const std::exception_ptr& error);
  Clock::time_point earliest_in_flight_deadline() const;
  // With no leader: wakes the waiter that should take over.
  void wake_next();

  mutable std::mutex mutex_;
  Connection connection_;  // touched only by the leader
  std::deque<Request*> queued_;     // not written yet
  std::deque<Request*> in_flight_;  // written, replies owed in this order
  bool leader_ = false;
  std::uint64_t batches_ = 0;
  std::uint64_t requests_ = 0;
};

}  // namespace lockon::detail
