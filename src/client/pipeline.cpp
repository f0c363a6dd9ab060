#include "client/pipeline.hpp"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <ctime>
#include <string>
#include <system_error>
#include <utility>

#include "client/completion.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {

struct Pipeline::Request {
  Request(std::span<const std::span<const std::string_view>> commands_, Clock::time_point deadline_,
          std::string_view operation_, ReplyPtr* replies_) noexcept
      : commands(commands_), deadline(deadline_), operation(operation_), replies(replies_) {}

  // The caller's commands, alive while it waits; written adjacently.
  std::span<const std::span<const std::string_view>> commands;
  Clock::time_point deadline;
  std::string_view operation;
  ReplyPtr* replies;  // commands.size() slots, the caller's
  std::exception_ptr error;
  Completion done;

  // Set by the owner before `done`: the next sleeping caller of the same
  // round, which this caller wakes as soon as it is awake (wake_completed).
  std::uint32_t* wake_next = nullptr;
  void fail(std::exception_ptr failure) noexcept {
    error = std::move(failure);
    done.set();
  }
};

namespace {

std::exception_ptr unsent_timeout(std::string_view operation, const std::string& endpoint) {
  return std::make_exception_ptr(TimeoutError(std::string(operation) + " on " + endpoint +
                                              ": deadline passed while queued for the shared connection (not sent)"));
}

std::exception_ptr owed_timeout(std::string_view operation, const std::string& endpoint) {
  return std::make_exception_ptr(TimeoutError(std::string(operation) + " on " + endpoint +
                                              ": deadline passed while its reply was owed on the shared connection "
                                              "(outcome unknown)"));
}

// A fresh exception object of the same lockon type and message for each
// caller failed together: one object (or one message: runtime_error keeps
// a reference-counted string) shared by several threads is read by one
// while another's last reference frees it, ordered only by a reference
// count inside libstdc++ that ThreadSanitizer cannot see. Other types are
// shared as they are.
template <class E>
std::exception_ptr fresh(const E& e) {
  return std::make_exception_ptr(E(std::string(e.what())));
}
template <class E>
std::exception_ptr fresh_reply_error(const E& e) {
  return std::make_exception_ptr(E(std::string(e.what()), e.code()));
}

std::exception_ptr own_copy(const std::exception_ptr& error) noexcept {
  try {
    std::rethrow_exception(error);
  } catch (const TlsError& e) {
    return fresh(e);
  } catch (const ConnectError& e) {
    return fresh(e);
  } catch (const TimeoutError& e) {
    return fresh(e);
  } catch (const ClosedError& e) {
    return fresh(e);
  } catch (const ProtocolError& e) {
    return fresh(e);
  } catch (const IoError& e) {
    return fresh(e);
  } catch (const AuthError& e) {
    return fresh_reply_error(e);
  } catch (const PermissionError& e) {
    return fresh_reply_error(e);
  } catch (const WrongTypeError& e) {
    return fresh_reply_error(e);
  } catch (const ReadOnlyError& e) {
    return fresh_reply_error(e);
  } catch (const ServerBusyError& e) {
    return fresh_reply_error(e);
  } catch (const ReplyError& e) {
    return fresh_reply_error(e);
  } catch (const UnsupportedServerError& e) {
    return fresh(e);
  } catch (const ConfigError& e) {
    return fresh(e);
  } catch (...) {
    return error;
  }
}

}  // namespace

Pipeline::Pipeline(ConnectionOptions options) : connection_(std::move(options)) {
  completed_.reserve(256);  // read_replies() must not allocate mid-round in practice
}

Pipeline::~Pipeline() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  io_wake_.notify_all();
  if (io_.joinable()) io_.join();
}

ReplyPtr Pipeline::call(std::span<const std::string_view> args, Clock::time_point deadline,
                        std::string_view operation) {
  const std::array<std::span<const std::string_view>, 1> one{args};
  ReplyPtr reply;
  Request request(one, deadline, operation, &reply);
  execute(request);
  if (request.error) std::rethrow_exception(request.error);
  return reply;
}

std::vector<ReplyPtr> Pipeline::call_many(std::span<const std::span<const std::string_view>> commands,
                                          Clock::time_point deadline, std::string_view operation) {
  if (commands.empty()) return {};
  std::vector<ReplyPtr> replies(commands.size());
  Request request(commands, deadline, operation, replies.data());
  execute(request);
  if (request.error) std::rethrow_exception(request.error);
  return replies;
}

void Pipeline::execute(Request& request) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock lock(mutex_);
  if (owner_ == Owner::idle) {
    owner_ = Owner::caller;
    lock.unlock();
    exchange(request);
    lock.lock();
    hand_over(lock);
    return;
  }
  // The owner (a caller's own exchange, or the I/O thread) takes the queue
  // before it next waits, so nobody needs waking.
  queued_.push_back(&request);
  lock.unlock();
  if (request.done.wait_until(request.deadline)) {
    if (request.wake_next != nullptr) Completion::wake(request.wake_next);
    return;
  }
  lock.lock();
  const auto at = std::find(queued_.begin(), queued_.end(), &request);
  if (at != queued_.end()) {
    // Never written, and the owner can no longer take it: certainly not run.
    queued_.erase(at);
    lock.unlock();
    request.error = unsent_timeout(request.operation, connection_.endpoint());
    return;
  }
  lock.unlock();
  // Taken by the owner: being written or in flight. The owner's read is
  // bounded by the earliest deadline in flight (ours) and then fails and
  // detaches this request, so this wait ends soon.
  request.done.wait_until(Clock::time_point::max());
  if (request.wake_next != nullptr) Completion::wake(request.wake_next);
}

void Pipeline::exchange(Request& request) noexcept {
  if (request.deadline <= Clock::now()) {
    request.error = unsent_timeout(request.operation, connection_.endpoint());
    return;
  }
  try {
    // The caller's deadline bounds a (re)connection too: a full accept queue
    // holds a SYN for a second or more (test_deadline_connect.cpp).
    if (!connection_.ensure_connected_by(request.deadline)) {
      request.error = unsent_timeout(request.operation, connection_.endpoint());
      return;
    }
    for (const auto& command : request.commands) connection_.append(command);
    connection_.flush(request.operation);
    batches_.fetch_add(1, std::memory_order_relaxed);
    const auto written_at = Clock::now();
    const std::size_t count = request.commands.size();
    for (std::size_t i = 0; i < count; ++i) {
      if (request.deadline >= connection_.timeout_deadline()) {
        // The socket timeout comes first: one blocking recv().
        request.replies[i] = connection_.read_reply(request.operation);
        continue;
      }
      ReplyPtr reply = connection_.read_reply_before(request.deadline, request.operation);
      if (!reply) {
        // Our deadline passed with replies owed: they are left to the next
        // owner (hand_over gives the I/O thread a connection owing replies),
        // which reads and drops them, instead of breaking the connection:
        // the next caller needs no reconnection (a frozen server could not
        // even answer its HELLO).
        leave_owed(count - i, written_at);
        request.error = owed_timeout(request.operation, connection_.endpoint());
        return;
      }
      request.replies[i] = std::move(reply);
    }
  } catch (...) {
    // ConnectError: nothing sent. Anything else: the connection is broken
    // (Connection marks it) and only this request was on it.
    request.error = std::current_exception();
  }
}

void Pipeline::leave_owed(std::size_t owed, Clock::time_point written_at) noexcept {
  try {
    in_flight_.push_back(InFlight{nullptr, owed});
    detached_owed_ += owed;
    last_progress_ = written_at;  // the socket timeout runs from the write
  } catch (...) {
    connection_.mark_broken();  // nothing can track the replies owed
  }
}

void Pipeline::hand_over(std::unique_lock<std::mutex>& lock) {
  if (queued_.empty() && in_flight_.empty()) {
    owner_ = Owner::idle;
    return;
  }
  owner_ = Owner::io_thread;
  if (!io_.joinable()) {
    try {
      io_ = std::thread([this] { io_loop(); });
    } catch (const std::system_error&) {
      // No thread to be had: this caller drains the queue itself.
      drain(lock, false);
      return;
    }
  }
  lock.unlock();
  io_wake_.notify_one();
  lock.lock();
}

void Pipeline::io_loop() {
  pthread_setname_np(pthread_self(), "lockon-pipeline");  // for top -H, perf, gdb
  std::unique_lock lock(mutex_);
  while (true) {
    io_wake_.wait(lock, [this] { return stop_ || owner_ == Owner::io_thread; });
    if (owner_ == Owner::io_thread) {
      drain(lock, true);
      continue;
    }
    return;  // stop_, nothing owned
  }
}

void Pipeline::drain(std::unique_lock<std::mutex>& lock, bool on_io_thread) {
  while (!queued_.empty() || !in_flight_.empty() || !completed_.empty()) {
    batch_.assign(queued_.begin(), queued_.end());
    queued_.clear();
    lock.unlock();
    if (!batch_.empty()) {
      write_batch();
      if (on_io_thread) io_batches_.fetch_add(1, std::memory_order_relaxed);
    }
    // The callers whose replies came in the last round are woken only now,
    // after the next batch left: the server works on it meanwhile.
    wake_completed();
    if (!in_flight_.empty()) read_replies();
    lock.lock();
  }
  owner_ = Owner::idle;
}

void Pipeline::wake_completed() noexcept {
  // A chain: the owner wakes the first sleeper of the round, each woken
  // caller wakes the next one (execute). Waking all from here cost the I/O
  // thread one futex call per caller and, worse, a preemption by nearly
  // each woken caller while the server sat idle (1.2 involuntary context
  // switches per lock cycle with 64 threads).
  std::uint32_t* next = nullptr;
  for (auto it = completed_.rbegin(); it != completed_.rend(); ++it) {
    Request* request = *it;
    request->wake_next = next;  // before `done`: the caller reads it after
    if (request->done.mark_done()) next = request->done.word();
    // `request` may be gone now; only its futex word's address is kept (a
    // late wake of a reused address is a harmless spurious wake-up).
  }
  completed_.clear();
  if (next != nullptr) Completion::wake(next);
}

void Pipeline::write_batch() noexcept {
  const auto now = Clock::now();
  std::size_t kept = 0;
  for (Request* request : batch_) {
    if (request->deadline <= now) {
      request->fail(unsent_timeout(request->operation, connection_.endpoint()));
    } else {
      batch_[kept++] = request;
    }
  }
  batch_.resize(kept);
  if (batch_.empty()) return;
  std::exception_ptr error;
  bool unsent = false;
  try {
    // A (re)connection waits at most until the batch's earliest deadline;
    // when it passes, those requests fail unsent and the rest wait on.
    while (true) {
      auto earliest = Clock::time_point::max();
      for (const Request* request : batch_) earliest = std::min(earliest, request->deadline);
      if (connection_.ensure_connected_by(earliest)) break;
      const auto passed = Clock::now();
      std::size_t waiting = 0;
      for (Request* request : batch_) {
        if (request->deadline <= passed) request->fail(unsent_timeout(request->operation, connection_.endpoint()));
        else batch_[waiting++] = request;
      }
      batch_.resize(waiting);
      if (batch_.empty()) return;
    }
    for (const Request* request : batch_)
      for (const auto& command : request->commands) connection_.append(command);
    connection_.flush(batch_.front()->operation);
    batches_.fetch_add(1, std::memory_order_relaxed);
  } catch (const ConnectError&) {
    // Not a byte of this batch left (see Connection::flush); requests in
    // flight, if any, are lost with the broken connection.
    error = std::current_exception();
    unsent = true;
  } catch (...) {
    error = std::current_exception();
  }
  try {
    if (!error || !unsent) {
      if (in_flight_.empty()) last_progress_ = Clock::now();  // the socket timeout runs from here
      // Strong guarantee (insertion at a deque's end): all or none.
      const std::size_t before = in_flight_.size();
      try {
        for (Request* request : batch_) in_flight_.push_back(InFlight{request, request->commands.size()});
      } catch (...) {
        in_flight_.resize(before);
        throw;
      }
    }
  } catch (...) {
    // No memory to track the replies owed: nothing on the connection can be
    // matched any more.
    error = std::current_exception();
    unsent = true;  // every one of batch_ still needs failing
    connection_.mark_broken();
  }
  if (error) {
    fail_in_flight(error);
    if (unsent)
      for (Request* request : batch_) request->fail(own_copy(error));
  }
  batch_.clear();
}

Pipeline::Clock::time_point Pipeline::earliest_in_flight_deadline() const noexcept {
  auto earliest = Clock::time_point::max();
  for (const InFlight& slot : in_flight_)
    if (slot.request != nullptr) earliest = std::min(earliest, slot.request->deadline);
  return earliest;
}

void Pipeline::fail_in_flight(const std::exception_ptr& error) noexcept {
  for (const InFlight& slot : in_flight_)
    if (slot.request != nullptr) slot.request->fail(own_copy(error));
  in_flight_.clear();
  detached_owed_ = 0;
}

void Pipeline::detach_expired() noexcept {
  const auto now = Clock::now();
  for (InFlight& slot : in_flight_) {
    Request* request = slot.request;
    if (request == nullptr || request->deadline > now) continue;
    slot.request = nullptr;  // its caller may be gone as soon as it is failed
    detached_owed_ += slot.owed;
    request->fail(owed_timeout(request->operation, connection_.endpoint()));
  }
  if (detached_owed_ > kMaxDetachedReplies) {
    connection_.mark_broken();
    fail_in_flight(std::make_exception_ptr(
        TimeoutError(connection_.endpoint() + ": too many replies owed to callers that gave up (connection dropped)")));
  }
}

void Pipeline::read_replies() noexcept {
  // One blocking read; the replies that came with it (or after) are already
  // buffered and taken without waiting again. New requests are written
  // between two such rounds (drain). The earliest deadline in flight is
  // recomputed only when the request that had it leaves (a scan per reply
  // was quadratic in the batch).
  //
  // The wait is bounded by the socket timeout since the last reply (a
  // stall: the connection breaks) and, before that, by the earliest
  // deadline in flight (soft: that request is detached, the owner returns
  // to its loop and reads on). The stall bound has 5 ms of slack so that a
  // connection that just answered waits in one blocking recv() (the
  // connection's own timed read) instead of recv, poll and recv.
  const auto timeout = connection_.options().socket_timeout;
  auto deadline = earliest_in_flight_deadline();
  do {
    InFlight& front = in_flight_.front();
    const std::string_view operation =
        front.request != nullptr ? front.request->operation : std::string_view("reply owed to a caller that gave up");
    poll_before_sleeping(deadline);
    ReplyPtr reply;
    try {
      const auto stall = timeout.count() > 0 ? last_progress_ + timeout + std::chrono::milliseconds(5)
                                             : Clock::time_point::max();
      if (deadline < stall) {
        reply = connection_.read_reply_before(deadline, operation);
        if (!reply) {
          detach_expired();
          return;  // drain() writes what queued meanwhile and reads on
        }
      } else {
        reply = connection_.read_reply_by(stall, operation);
      }
    } catch (...) {
      // The connection is broken (Connection marks it): its later replies
      // can never reach a request, every request in flight fails.
      fail_in_flight(std::current_exception());
      return;
    }
    last_progress_ = Clock::now();
    Request* request = front.request;
    // The slot's count of replies owed says which of the caller's replies
    // this is.
    if (request != nullptr) request->replies[request->commands.size() - front.owed] = std::move(reply);
    const bool last = --front.owed == 0;
    if (request == nullptr) {
      --detached_owed_;  // dropped: its caller already has its TimeoutError
      if (last) in_flight_.pop_front();
      continue;
    }
    if (!last) continue;
    in_flight_.pop_front();
    const bool had_earliest = request->deadline == deadline && deadline != Clock::time_point::max();
    completed_.push_back(request);  // done (and woken) in wake_completed
    if (had_earliest) deadline = earliest_in_flight_deadline();
  } while (!in_flight_.empty() && connection_.has_buffered_input());
}

// The server answers a batch within a round trip or so; sleeping in poll()
// for it costs a wake-up (on this VM tens of µs: an idle vCPU halts at once)
// that the 64-thread benchmark paid on every round. So the I/O thread first
// looks without sleeping, yielding between looks so the callers it just
// woke get the CPU, for at most reply_spin; a stalled server costs that
// much CPU per reply awaited, then the read sleeps as before.
void Pipeline::poll_before_sleeping(Clock::time_point deadline) noexcept {
  const auto spin = connection_.options().reply_spin;
  if (spin.count() <= 0 || connection_.has_buffered_input() || connection_.fd() < 0) return;
  pollfd probe{connection_.fd(), POLLIN, 0};
  const auto end = std::min(deadline, Clock::now() + spin);
  while (Clock::now() < end) {
    const int ready = ::poll(&probe, 1, 0);
    if (ready != 0) {
      if (ready > 0) seen_polling_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    ::sched_yield();
  }
}

}  // namespace lockon::detail
