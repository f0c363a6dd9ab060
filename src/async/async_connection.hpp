// One multiplexed, pipelined connection to one Redis node, on an Asio
// executor: the I/O core of the async front (include/lockon/async.hpp).
//
// Many coroutines share it. A request is a block of RESP commands owing N
// replies; requests queue in a FIFO and replies are matched to them in
// order. Requests queued while the writer is busy (or before it runs) go out
// in one write: concurrent coroutines pipeline by construction.
//
// Deadlines never tear the connection down: a request whose caller gave up
// (deadline passed, or the awaiting coroutine was cancelled) is marked
// abandoned and its reply, when it comes, is read and discarded, so the
// stream stays in step. The socket timeout is checked per connection, not
// per request: when replies are owed and none arrived for socket_timeout,
// every owed request fails with TimeoutError (and is abandoned, the
// connection kept); requests merely queued behind many others on a server
// that keeps answering do not time out. Only an I/O failure (EOF, reset, protocol error) or
// a failed handshake closes it: every request still owed a reply then fails
// (ConnectError if not one of its bytes was written — it certainly did not
// run — else ClosedError: outcome unknown), and the next request reconnects.
//
// I/O runs on the lockon Transport (non-blocking read_some/write_some);
// readiness is waited for with a stream_descriptor on fd(), which the
// connection releases before the transport closes the socket. The connect
// itself is asynchronous too (async_connect.hpp); the handshake (HELLO 2
// [AUTH], SELECT) is queued in front of the first requests, as the blocking
// Connection does.
//
// Threading: every member runs on the connection's executor: one thread
// running the io_context, or the client's strand (AsyncClientOptions::
// multi_threaded), so one handler of the connection runs at a time. On a
// strand, the readiness waits must survive another thread running the
// (edge-triggered) reactor between a read that found nothing and the
// registration of the wait (the edge would be consumed with no wait
// queued; Asio 1.22's async_wait never tries speculatively): there
// wait_ready_async() registers the wait and then looks at the socket once
// with poll(fd, 0), cancelling the wait if it is ready already. With one
// thread nothing runs the reactor in between, and the poll() is skipped.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/hiredis_handles.hpp"
#include "client/server_version.hpp"
#include "client/transport.hpp"
#include "lockon/options.hpp"

namespace lockon::detail {

class AsyncConnection : public std::enable_shared_from_this<AsyncConnection> {
 public:
  using Clock = std::chrono::steady_clock;
  using Executor = asio::any_io_executor;

  /// How an exchange ended when it has no replies.
  enum class Ended { replied, deadline, cancelled };
  struct Outcome {
    Ended ended = Ended::replied;
    std::vector<ReplyPtr> replies;  // all of them when ended == replied
  };

  /// A connection idle for longer than this is probed (one poll()) before
  /// the next request is sent: see stale().
  static constexpr auto kIdleCheckAfter = std::chrono::milliseconds(2);

  /// `role`: what the server must be (a Sentinel only where one is meant:
  /// check_hello_reply).
  AsyncConnection(Executor executor, ConnectionOptions options, ServerRole role = ServerRole::data);
  ~AsyncConnection();
  AsyncConnection(const AsyncConnection&) = delete;
  AsyncConnection& operator=(const AsyncConnection&) = delete;

  /// Queues `resp` (RESP commands owing `replies` replies; see append_resp)
  /// and waits for all replies until `until`. Connects first if needed.
  /// TimeoutError when the connection went socket_timeout without any reply
  /// while this request was owed (a stalled server; a deep pipeline on a
  /// live server is not a timeout).
  /// Ended::deadline / Ended::cancelled (the awaiting coroutine's
  /// cancellation slot fired): no replies, the request's outcome is unknown
  /// (it may still run; its replies will be discarded). Error replies are
  /// returned, not thrown. Throws IoError subclasses (ConnectError: the
  /// request was certainly not sent), AuthError/UnsupportedServerError (the
  /// handshake failed).
  asio::awaitable<Outcome> exchange(std::string resp, std::size_t replies, Clock::time_point until,
                                    std::string_view operation);

  /// For the subscriber: bytes with no reply owed to a request (SUBSCRIBE).
  /// Every reply not owed to a queued request goes to the push handler.
  /// Connects if needed.
  void send_unowed(std::string_view resp);
  void set_push_handler(std::function<void(ReplyPtr)> handler) { push_handler_ = std::move(handler); }
  /// Called after each successful handshake, and after each failure
  /// (with the error) — on the executor.
  void set_state_handler(std::function<void(bool up, std::exception_ptr)> handler) {
    state_handler_ = std::move(handler);
  }

  /// Starts connecting if disconnected (no-op otherwise).
  void ensure_connected();
  bool connected() const noexcept { return state_ == State::up; }
  /// Fails every request (ClosedError) and closes the socket; later
  /// requests reconnect. Idempotent.
  void close() noexcept;

  const std::string& endpoint() const noexcept { return endpoint_; }
  const ConnectionOptions& options() const noexcept { return options_; }
  const Executor& executor() const noexcept { return executor_; }
  /// Requests waiting for replies (including abandoned ones), for tests.
  std::size_t owed() const noexcept { return fifo_.size(); }

 private:
  enum class State { down, connecting, up };

 public:
  struct Request;

 private:

  std::shared_ptr<Request> enqueue(std::string_view resp, std::size_t replies);
  bool stale() const noexcept;
  void start_connect();
  asio::awaitable<void> connect_and_run(std::uint64_t generation);
  asio::awaitable<void> read_loop(std::uint64_t generation);
  asio::awaitable<void> write_loop(std::uint64_t generation);
  void wake_writer() noexcept;
  void arm_stall_check();
  void check_stall() noexcept;
  void on_reply(ReplyPtr reply);
  // `from_handshake`: the handshake failed (its error goes to every owed
  // request); `unanswered`: it got no answer at all (a stalled server runs
  // the requests written behind it when it wakes: those get TimeoutError).
  void fail(std::exception_ptr error, bool from_handshake, bool unanswered = false) noexcept;
  void finish(const std::shared_ptr<Request>& request) noexcept;
  void resume_ready();

  Executor executor_;
  ConnectionOptions options_;
  std::string endpoint_;
  ServerRole role_ = ServerRole::data;
  State state_ = State::down;
  std::uint64_t generation_ = 0;  // bumped by every connect and failure
  std::unique_ptr<Transport> transport_;
  std::optional<asio::posix::stream_descriptor> descriptor_;
  ReaderPtr reader_;
  std::string out_;                // bytes not written yet
  std::uint64_t queued_bytes_ = 0;   // total bytes ever queued on this socket
  std::uint64_t written_bytes_ = 0;  // total bytes written on this socket
  std::deque<std::shared_ptr<Request>> fifo_;
  asio::steady_timer writer_signal_;
  asio::steady_timer stall_timer_;
  bool stall_armed_ = false;
  std::uint64_t stall_epoch_ = 0;  // a re-armed or cancelled check is stale
  Clock::time_point last_progress_{};  // last reply, or when owing began
  bool writer_idle_ = false;
  std::function<void(ReplyPtr)> push_handler_;
  std::function<void(bool, std::exception_ptr)> state_handler_;
  bool recheck_ = false;  // is_strand(executor_)
  bool deferring_ = false;  // the read loop is parsing: finish() queues on ready_
  std::vector<std::shared_ptr<Request>> ready_;
};

/// Waits until `descriptor` is ready for `what`, safe against a lost edge
/// when other threads run the reactor (see above). Completes with an error
/// code (operation_aborted also when ready at registration: look again).
asio::awaitable<asio::error_code> wait_ready_async(asio::posix::stream_descriptor& descriptor,
                                                  asio::posix::stream_descriptor::wait_type what, bool recheck);

/// Whether `executor` is a strand (a multi-threaded io_context may run it):
/// waits on it need wait_ready_async's re-check.
bool is_strand(const asio::any_io_executor& executor) noexcept;

/// Formats an EVALSHA/EVAL of `script` (by SHA or body) as RESP onto `out`.
class Script;
void append_script(std::string& out, const Script& script, bool by_sha, std::span<const std::string_view> keys,
                   std::span<const std::string_view> args);

}  // namespace lockon::detail
