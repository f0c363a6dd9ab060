// lockon/async.hpp — the async API: C++20 coroutines on standalone Asio.
//
// An optional component: link `lockon::async` (CMake:
// `find_package(lockon COMPONENTS async)`); this header includes Asio, the
// synchronous headers do not.
//
//   asio::io_context io;
//   lockon::AsyncClient client(io.get_executor(), "redis://127.0.0.1:6379");
//   asio::co_spawn(io, [&]() -> asio::awaitable<void> {
//     lockon::AsyncLock lock(client, "orders:42");
//     auto guard = co_await lockon::async_scoped(lock);
//     ...                                   // critical section
//     co_await guard.release();
//     client.close();  // an open client keeps work outstanding: io.run() returns once it is closed
//   }, asio::detached);
//   io.run();
//
// No thread per waiter or per lock: requests of every coroutine share one
// pipelined connection per client, waiters share one pub/sub connection per
// client, renewal is a timer on the executor. The wire protocol is the
// synchronous Lock's (same keys, scripts, FIFO queue, hand-over, fences):
// Lock and AsyncLock on one key exclude each other and hand over both ways.
//
// Completion tokens: every async_* takes an Asio completion token, by
// default asio::use_awaitable. The completion signature is that of
// asio::co_spawn: void(std::exception_ptr) or void(std::exception_ptr, T),
// so callbacks and asio::use_future work too.
//
// Cancellation: every async_* honours per-operation cancellation (e.g.
// `co_await (lock.async_lock() || timer.async_wait(use_awaitable))` with
// asio::experimental::awaitable_operators). A cancelled acquisition leaves
// the FIFO queue before it completes (with asio::error::operation_aborted),
// and whatever its in-flight requests may still win is passed on — it never
// acquires later. async_unlock() cannot be cancelled (it finishes the release).
//
// Threading: an AsyncClient and its locks run on the client's executor.
// By default that executor must be run by one thread at a time (an
// io_context run by a single thread: the faster mode). To run it with
// several threads, set AsyncClientOptions::multi_threaded (or pass a strand
// as the executor): the client then keeps its state and its locks' on a
// strand of its own. Either way operations may be started from coroutines
// on any executor; they run on the client's and complete on the caller's
// (docs/async.md, Threading). One AsyncLock serves one operation at a time;
// fence(), held(), lost() are meant to be read from the client's executor.
//
// URLs: standalone, Unix, TLS, Sentinel and Cluster (docs/async.md).
// Limitation (this version): LockOptions::keep_queue_place is not supported
// (ConfigError).
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/use_awaitable.hpp>

// Asio 1.22 turns its coroutine support on by itself with GCC only.
#if !defined(ASIO_HAS_CO_AWAIT)
#error "lockon/async.hpp needs Asio's coroutine support: with clang and Asio 1.22 define ASIO_HAS_CO_AWAIT and ASIO_HAS_STD_COROUTINE (the lockon::async CMake target does; see README, Requirements)"
#endif

#include <chrono>
#include <concepts>
#include <cstdint>
#include <exception>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lockon/options.hpp"

namespace lockon {

namespace detail {
class AsyncClientImpl;
class AsyncLockImpl;
}  // namespace detail

/// Options of the async client beyond the connection's.
struct AsyncClientOptions {
  /// While locks wait and the pub/sub connection is down, how long to wait
  /// between attempts to reopen it (waiters poll meanwhile). Must be > 0.
  std::chrono::milliseconds reconnect_delay{100};
  /// Set when several threads run the executor's io_context: the client
  /// then keeps its state (connections, subscriber, every lock's) on a
  /// strand over the executor and makes its readiness waits safe against a
  /// reactor run by another thread (one poll() more per wait). Off: the
  /// executor must be run by one thread at a time (the faster default).
  /// Passing a strand as the executor also selects the safe waits.
  bool multi_threaded = false;
};

/// A handle to one Redis server for coroutines: one multiplexed, pipelined
/// command connection and, once a lock waits, one pub/sub connection.
/// Copies share them. Connecting is lazy, asynchronous and bounded by
/// connect_timeout. socket_timeout bounds how long the connection may owe
/// replies without receiving any (a stalled server): every owed request then
/// fails with TimeoutError, the connection is kept. A caller's own deadline
/// (async_try_lock_for) comes first.
/// The arguments of one command: a braced list of strings —
/// `co_await client.async_command({"GET", key})` — or a
/// std::vector<std::string>. A class rather than std::initializer_list:
/// GCC 12 rejects an initializer_list made inside a co_await expression
/// ("array used as initializer"); a braced list that calls this variadic
/// constructor makes none.
class CommandArgs {
 public:
  CommandArgs(std::vector<std::string> args) : args_(std::move(args)) {}  // NOLINT: implicit by design
  template <class... Parts>
    requires(sizeof...(Parts) > 0 && (std::convertible_to<const Parts&, std::string_view> && ...))
  CommandArgs(const Parts&... parts) {  // NOLINT: implicit by design
    args_.reserve(sizeof...(Parts));
    (args_.emplace_back(std::string_view(parts)), ...);
  }
  std::vector<std::string> take() && noexcept { return std::move(args_); }

 private:
  std::vector<std::string> args_;
};

class AsyncClient {
 public:
  using executor_type = asio::any_io_executor;

  /// Throws ConfigError for invalid options.
  AsyncClient(executor_type executor, std::string_view url, AsyncClientOptions options = {});
  AsyncClient(executor_type executor, ConnectionOptions connection, AsyncClientOptions options = {});

  const executor_type& get_executor() const noexcept;
  const ConnectionOptions& options() const noexcept;
  /// "host:port" (no credentials).
  const std::string& endpoint() const noexcept;

  /// One command, pipelined with every other coroutine's. Completes with
  /// its Reply; error replies throw ReplyError subclasses, I/O failures
  /// IoError subclasses. Commands that would change the shared connection's
  /// session or reply stream (as Client::command lists, MULTI included)
  /// throw ConfigError before anything is sent.
  template <class Token = asio::use_awaitable_t<>>
  auto async_command(CommandArgs args, Token&& token = {}) const {
    return asio::co_spawn(get_executor(), command_op(impl_, std::move(args).take()), std::forward<Token>(token));
  }

  /// Closes both connections: pending requests fail with ClosedError. The
  /// background clean-ups of abandoned attempts (a lost reply, a refused
  /// release; retried for up to 10 minutes) end too: what they had not
  /// cleaned yet expires with its TTL. Nothing then keeps the executor's
  /// work outstanding. The client reconnects if used again.
  void close() noexcept;

  const std::shared_ptr<detail::AsyncClientImpl>& impl() const noexcept { return impl_; }

 private:
  static asio::awaitable<Reply> command_op(std::shared_ptr<detail::AsyncClientImpl> impl,
                                           std::vector<std::string> args);
  std::shared_ptr<detail::AsyncClientImpl> impl_;
};

/// The single-instance lock (see lockon/lock.hpp) for coroutines.
///
/// Lease loss is *signalled*, not a cancellation: lost() turns true,
/// lost_token() is stopped and LockOptions::on_lost runs on the client's
/// executor; the holding coroutine keeps running and should look (a fencing
/// token — fence() — protects the resource against a late holder). Renewal
/// (LockOptions::auto_renew) is a timer on the executor renewing every ttl/3.
///
/// One operation at a time per object (like a std::unique_lock): starting a
/// second while one runs throws LockError.
class AsyncLock {
 public:
  using Clock = std::chrono::steady_clock;

  /// Validates like Lock (ConfigError: an empty name or one over
  /// kMaxNameBytes, lockon/name.hpp; options out of range), without I/O.
  AsyncLock(AsyncClient client, std::string name, LockOptions options = {});
  /// If still held: releases in the background (a detached unlock on the
  /// client's executor; if that never runs, the key expires by its ttl).
  ~AsyncLock();
  AsyncLock(const AsyncLock&) = delete;
  AsyncLock& operator=(const AsyncLock&) = delete;

  /// Waits until acquired. Throws LockError if already held by this
  /// object, IoError/ReplyError on infrastructure failure (having left the
  /// queue, or handed that to a background clean-up).
  template <class Token = asio::use_awaitable_t<>>
  auto async_lock(Token&& token = {}) {
    return asio::co_spawn(executor(), lock_op(impl_), std::forward<Token>(token));
  }
  /// One attempt, never waits: true if acquired.
  template <class Token = asio::use_awaitable_t<>>
  auto async_try_lock(Token&& token = {}) {
    return asio::co_spawn(executor(), try_op(impl_, Clock::time_point::min()), std::forward<Token>(token));
  }
  /// Waits at most `timeout`: true if acquired, false on timeout (never
  /// oversleeping it by more than a round trip; a late reply's win is
  /// passed on by a clean-up).
  template <class Token = asio::use_awaitable_t<>>
  auto async_try_lock_for(std::chrono::milliseconds timeout, Token&& token = {}) {
    const auto deadline = timeout.count() <= 0 ? Clock::time_point::min() : deadline_after(timeout);
    return asio::co_spawn(executor(), try_op(impl_, deadline), std::forward<Token>(token));
  }
  /// Releases if held; never fails (failures are recorded in
  /// last_unlock_error() and declare the lease lost, as Lock::unlock()).
  template <class Token = asio::use_awaitable_t<>>
  auto async_unlock(Token&& token = {}) {
    return asio::co_spawn(executor(), unlock_op(impl_), std::forward<Token>(token));
  }
  /// Adds `additional` to the remaining ttl (or sets it, `replace_ttl`).
  /// Throws like Lock::extend().
  template <class Token = asio::use_awaitable_t<>>
  auto async_extend(std::chrono::milliseconds additional, bool replace_ttl = false, Token&& token = {}) {
    return asio::co_spawn(executor(), extend_op(impl_, additional, replace_ttl), std::forward<Token>(token));
  }

  /// Whether this object holds the lock (local state).
  bool held() const noexcept;
  /// As DistributedLock::lost(): declared lost, or the provable lease end passed.
  bool lost() const noexcept;
  std::stop_token lost_token() const noexcept;
  /// The fence of the current acquisition (LockOptions::fencing), else 0.
  std::uint64_t fence() const noexcept;
  const std::string& name() const noexcept;
  const LockOptions& options() const noexcept;
  std::exception_ptr last_unlock_error() const noexcept;
  const asio::any_io_executor& executor() const noexcept;

  /// Starts a detached release on the executor (what the destructors of
  /// AsyncLock and AsyncGuard do). No-op when not held.
  void unlock_detached() noexcept;

 private:
  static Clock::time_point deadline_after(std::chrono::milliseconds timeout) noexcept;
  static asio::awaitable<void> lock_op(std::shared_ptr<detail::AsyncLockImpl> impl);
  static asio::awaitable<bool> try_op(std::shared_ptr<detail::AsyncLockImpl> impl, Clock::time_point deadline);
  static asio::awaitable<void> unlock_op(std::shared_ptr<detail::AsyncLockImpl> impl);
  static asio::awaitable<void> extend_op(std::shared_ptr<detail::AsyncLockImpl> impl,
                                         std::chrono::milliseconds additional, bool replace_ttl);
  std::shared_ptr<detail::AsyncLockImpl> impl_;
};

/// Scope of one acquisition made by async_scoped(). Release with
/// `co_await guard.release()`. Destroyed while still holding (an exception,
/// a cancelled or destroyed coroutine), it starts a detached unlock on the
/// client's executor: the key is released shortly after, or — if the
/// executor never runs it (io_context stopped) — expires by its ttl, since
/// renewal stops with the executor.
class AsyncGuard {
 public:
  explicit AsyncGuard(AsyncLock& lock) noexcept : lock_(&lock) {}
  AsyncGuard(AsyncGuard&& other) noexcept : lock_(other.lock_) { other.lock_ = nullptr; }
  AsyncGuard& operator=(AsyncGuard&&) = delete;
  ~AsyncGuard() {
    if (lock_ != nullptr) lock_->unlock_detached();
  }
  /// Releases now (never fails; see AsyncLock::async_unlock).
  asio::awaitable<void> release() {
    if (lock_ == nullptr) co_return;
    // Throws only if the calling coroutine was already cancelled; the
    // destructor then releases in the background.
    co_await lock_->async_unlock(asio::use_awaitable);
    lock_ = nullptr;
  }
  AsyncLock& lock() const noexcept { return *lock_; }

 private:
  AsyncLock* lock_;
};

/// Acquires `lock` (waiting as long as it takes) and returns its guard.
asio::awaitable<AsyncGuard> async_scoped(AsyncLock& lock);
/// As above, waiting at most `timeout`: AcquireTimeout after it.
asio::awaitable<AsyncGuard> async_scoped(AsyncLock& lock, std::chrono::milliseconds timeout);

}  // namespace lockon

#include "lockon/async_locker.hpp"
