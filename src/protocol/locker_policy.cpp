// The rules of a LockerPolicy, for both lockers (RedisLocker and
// AsyncRedisLocker): validation and the LockOptions a policy implies. No I/O.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "lockon/errors.hpp"
#include "lockon/name.hpp"
#include "lockon/options.hpp"
#include "lockon/policy.hpp"

namespace lockon::detail {
namespace {

using std::chrono::milliseconds;

// Long enough for any real policy, short enough that now + d never overflows
// steady_clock (±292 years of nanoseconds).
constexpr milliseconds kMaxPolicyDuration = std::chrono::hours(24 * 365);

void check_duration(milliseconds value, const char* field, bool allow_zero) {
  if (value.count() < 0 || (!allow_zero && value.count() == 0)) {
    throw ConfigError(std::string("lockon: LockerPolicy::") + field + (allow_zero ? " must not be negative" : " must be positive"));
  }
  if (value > kMaxPolicyDuration) throw ConfigError(std::string("lockon: LockerPolicy::") + field + " exceeds 365 days");
}

}  // namespace

PreparedPolicy PreparedPolicy::prepare(LockerPolicy policy) {
  if (policy.max_retry < 0) throw ConfigError("lockon: LockerPolicy::max_retry must not be negative (0 = unlimited)");
  check_duration(policy.retry_delay, "retry_delay", true);
  check_duration(policy.retry_jitter, "retry_jitter", true);
  check_duration(policy.timeout, "timeout", true);
  check_duration(policy.ttl, "ttl", false);
  if (policy.max_retry == 0 && policy.retry_delay.count() == 0 && policy.retry_jitter.count() == 0) {
    throw ConfigError("lockon: LockerPolicy with max_retry = 0 (unlimited, the default since 0.2) and retry_delay = 0 "
                      "would retry in a busy loop; set a retry_delay, or a max_retry for that many immediate tries");
  }
  if (policy.key_prefix.empty()) throw ConfigError("lockon: LockerPolicy::key_prefix must not be empty");
  // Every key starts with it: one over the name limit gives no valid key.
  validate_name(policy.key_prefix, "lockon: LockerPolicy::key_prefix");
  LockOptions options;
  options.ttl = policy.ttl;
  options.auto_renew = policy.auto_renew;
  options.fencing = policy.fencing;
  options.replica_acks = policy.replica_acks;
  options.holder_label = policy.holder_label;
  // One queue place for the whole call: each retry window continues from it.
  options.keep_queue_place = true;
  static std::atomic<std::uint64_t> next_id{1};
  return PreparedPolicy{std::move(policy), std::move(options), next_id.fetch_add(1, std::memory_order_relaxed)};
}

}  // namespace lockon::detail
