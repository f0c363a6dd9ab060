// AsyncLocker: the acquisition policy of async_lock_on (async_locker.hpp).
#include <algorithm>
#include <string>

#include "common/metrics_internal.hpp"
#include "lockon/async.hpp"

namespace lockon {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

std::string describe(std::string_view function_name, const std::string& key) {
  return "async_lock_on '" + std::string(function_name) + "' (lock '" + key + "')";
}

asio::awaitable<int> acquire_under_policy(const AsyncLockerCore& core, AsyncLock& lock,
                                          std::string_view function_name) {
  const LockerPolicy& policy = core.prepared.policy;
  const auto start = Clock::now();
  const bool bounded = policy.timeout.count() > 0;
  const auto deadline = bounded ? start + policy.timeout : Clock::time_point::max();
  const auto elapsed = [&] { return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start); };
  int attempts = 0;
  bool acquired = false;
  if (policy.retry_delay.count() == 0 && policy.retry_jitter.count() == 0) {
    // Each attempt is one immediate try, as the synchronous locker does.
    while (true) {
      ++attempts;
      acquired = co_await lock.async_try_lock(asio::use_awaitable);
      if (acquired || (policy.max_retry > 0 && attempts >= policy.max_retry) || (bounded && Clock::now() >= deadline))
        break;
    }
  } else {
    // max_retry windows of retry_delay, cut to the deadline, waited as one
    // wait on one queue place.
    auto end = deadline;
    if (policy.max_retry > 0) {
      const auto windows = std::chrono::milliseconds(policy.retry_delay.count() * policy.max_retry);
      end = std::min(end, start + windows);
    }
    if (end == Clock::time_point::max()) {
      co_await lock.async_lock(asio::use_awaitable);
      acquired = true;
    } else {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(end - Clock::now());
      acquired = co_await lock.async_try_lock_for(std::max(left, std::chrono::milliseconds(1)), asio::use_awaitable);
    }
    const auto delay = std::max<long long>(policy.retry_delay.count(), 1);
    attempts = static_cast<int>(std::max<long long>(1, elapsed().count() / delay + (acquired ? 1 : 0)));
    if (policy.max_retry > 0) attempts = std::min(attempts, policy.max_retry);
  }
  if (policy.on_attempt) {
    try {
      policy.on_attempt(AttemptEvent{function_name, lock.name(), attempts, acquired, elapsed()});
    } catch (...) {
      if (acquired) lock.unlock_detached();
      throw;
    }
  }
  if (acquired) {
    metrics_detail::record_acquire(function_name, metrics_detail::Outcome::acquired, Clock::now() - start);
    co_return attempts;
  }
  const std::string counted = std::to_string(attempts) + (attempts == 1 ? " attempt" : " attempts");
  // The deadline wins when both limits are reached.
  if (bounded && Clock::now() >= deadline)
    throw AcquireTimeout(describe(function_name, lock.name()) +
                             ": acquire lock timeout: still held by another owner after " +
                             std::to_string(elapsed().count()) + " ms (" + counted + ")",
                         lock.name());
  throw RetriesExhausted(describe(function_name, lock.name()) +
                             ": acquire lock exceed max retry: held by another owner on all " + counted + " (" +
                             std::to_string(elapsed().count()) + " ms)",
                         lock.name());
}

}  // namespace

asio::awaitable<int> async_acquire_for_call(const AsyncLockerCore& core, AsyncLock& lock,
                                            std::string_view function_name) {
  // Recorded into the same registry as lock_on's (lockon/metrics.hpp): an
  // error here is an infrastructure failure, busy and timeouts are counted below.
  try {
    co_return co_await acquire_under_policy(core, lock, function_name);
  } catch (const AcquireTimeout&) {
    metrics_detail::record_acquire(function_name, metrics_detail::Outcome::timeout, {});
    throw;
  } catch (const RetriesExhausted&) {
    metrics_detail::record_acquire(function_name, metrics_detail::Outcome::busy, {});
    throw;
  } catch (const Error&) {
    metrics_detail::record_acquire(function_name, metrics_detail::Outcome::error, {});
    throw;
  }
}

void record_async_release(std::string_view function_name, std::chrono::steady_clock::time_point acquired_at,
                          bool lost) noexcept {
  metrics_detail::record_release(function_name, std::chrono::steady_clock::now() - acquired_at, lost);
}

namespace {

std::shared_ptr<const AsyncLockerCore> make_core(AsyncClient client, LockerPolicy policy) {
  PreparedPolicy prepared = PreparedPolicy::prepare(std::move(policy));
  // A call's windows are one wait here (see async_locker.hpp).
  prepared.lock_options.keep_queue_place = false;
  return std::make_shared<const AsyncLockerCore>(AsyncLockerCore{std::move(client), std::move(prepared)});
}

}  // namespace
}  // namespace detail

AsyncLocker::AsyncLocker(AsyncClient client, LockerPolicy policy)
    : core_(detail::make_core(std::move(client), std::move(policy))) {}

std::shared_ptr<const detail::AsyncLockerCore> AsyncLocker::with_policy(LockerPolicy policy) const {
  return detail::make_core(core_->client, std::move(policy));
}

std::string AsyncLocker::digest_for(std::string_view name, const LockOnOptions& options) {
  if (name.empty()) throw ConfigError("lockon: async_lock_on needs a non-empty function name");
  if (options.reentrant)
    throw ConfigError("async_lock_on '" + std::string(name) +
                      "': reentrant is not supported (reentrancy is per thread, and the coroutines of one thread are "
                      "not one owner); call the inner function's body directly while holding the lock");
  return options.scope == KeyScope::entity ? std::string() : function_digest(name);
}

}  // namespace lockon
