// lockon::AsyncLock's public members and async_scoped (async.hpp).
#include <asio/dispatch.hpp>
#include <asio/use_awaitable.hpp>

#include "async/async_lock_impl.hpp"

namespace lockon {

AsyncLock::AsyncLock(AsyncClient client, std::string name, LockOptions options)
    : impl_(std::make_shared<detail::AsyncLockImpl>(client.impl(), std::move(name), std::move(options))) {}

AsyncLock::~AsyncLock() {
  // On the client's strand: a renewal may be running on another thread.
  try {
    asio::dispatch(impl_->client()->executor(), [impl = impl_] {
      impl->orphan();
      impl->release_detached();
    });
  } catch (...) {
  }
}

AsyncLock::Clock::time_point AsyncLock::deadline_after(std::chrono::milliseconds timeout) noexcept {
  return detail::add_saturating(Clock::now(), timeout);
}

asio::awaitable<void> AsyncLock::lock_op(std::shared_ptr<detail::AsyncLockImpl> impl) {
  // Ends with the lock or an exception, never without it.
  const bool acquired = co_await impl->acquire(Clock::time_point::max());
  if (!acquired) throw LockError("lock '" + impl->name() + "': the acquisition ended without the lock", impl->name());
}

asio::awaitable<bool> AsyncLock::try_op(std::shared_ptr<detail::AsyncLockImpl> impl, Clock::time_point deadline) {
  co_return co_await impl->acquire(deadline);
}

asio::awaitable<void> AsyncLock::unlock_op(std::shared_ptr<detail::AsyncLockImpl> impl) {
  co_await detail::uncancellable();  // an unlock always runs to its end
  co_await impl->release();
}

asio::awaitable<void> AsyncLock::extend_op(std::shared_ptr<detail::AsyncLockImpl> impl,
                                           std::chrono::milliseconds additional, bool replace_ttl) {
  co_await impl->extend(additional, replace_ttl);
}

bool AsyncLock::held() const noexcept { return impl_->held(); }
bool AsyncLock::lost() const noexcept { return impl_->lease() && impl_->lease()->lost(); }
std::stop_token AsyncLock::lost_token() const noexcept {
  return impl_->lease() ? impl_->lease()->token() : std::stop_token{};
}
std::uint64_t AsyncLock::fence() const noexcept { return impl_->fence(); }
const std::string& AsyncLock::name() const noexcept { return impl_->name(); }
const LockOptions& AsyncLock::options() const noexcept { return impl_->options(); }
std::exception_ptr AsyncLock::last_unlock_error() const noexcept { return impl_->last_unlock_error(); }
const asio::any_io_executor& AsyncLock::executor() const noexcept { return impl_->client()->executor(); }
void AsyncLock::unlock_detached() noexcept {
  try {
    asio::dispatch(impl_->client()->executor(), [impl = impl_] { impl->release_detached(); });
  } catch (...) {
  }
}

asio::awaitable<AsyncGuard> async_scoped(AsyncLock& lock) {
  co_await lock.async_lock(asio::use_awaitable);
  co_return AsyncGuard(lock);
}

asio::awaitable<AsyncGuard> async_scoped(AsyncLock& lock, std::chrono::milliseconds timeout) {
  // (A co_await inside the if's condition miscompiles with GCC 12.)
  const bool acquired = co_await lock.async_try_lock_for(timeout, asio::use_awaitable);
  if (!acquired)
    throw AcquireTimeout("unable to acquire lock '" + lock.name() + "' within the time specified", lock.name());
  co_return AsyncGuard(lock);
}

}  // namespace lockon
