// A queued waiter's attempt (scripts::wait_attempt): its arguments and its
// reply, built and read here only (the blocking Lock and AsyncLock).
//
// ARGV: queue entry, enqueue-if-missing ("1"/"0"), the queue's ttl in ms,
// token is random ("1"/"0") [, the waiter's holder record]. The reply is
// four integers: {1, fence, denied, 0} acquired; {0, pttl, denied, ahead}
// not (pttl -1: no expiry, -2: free and just handed to a waiter ahead);
// {-1, 0, denied, 0}: K holds this caller-chosen token for someone else.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "client/hiredis_handles.hpp"
#include "protocol/queue_entry.hpp"

namespace lockon::detail {

/// The attempt's ARGV; views of the arguments, which must outlive it.
class WaitAttemptArgs {
 public:
  WaitAttemptArgs(std::string_view entry, bool enqueue, bool random_token, std::string_view record) noexcept
      : all_{entry, enqueue ? "1" : "0", kQueueTtlMs, random_token ? "1" : "0", record},
        count_(record.empty() ? 4 : 5) {}
  std::span<const std::string_view> view() const noexcept { return std::span(all_).first(count_); }

 private:
  std::array<std::string_view, 5> all_;
  std::size_t count_;
};

struct WaitAttemptReply {
  bool acquired = false;
  bool token_in_use = false;    // K holds the caller-chosen token for someone else
  bool publish_denied = false;  // a wake-up could not be published (ACL channel rights)
  std::uint64_t fence = 0;      // acquired
  long long pttl = -2;          // not acquired
  long long ahead = -1;         // not acquired: entries queued before ours
};

/// The reply read, or nullopt if it is not four integers (the caller's
/// ProtocolError).
inline std::optional<WaitAttemptReply> read_wait_attempt(const redisReply& reply) noexcept {
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 4) return std::nullopt;
  for (std::size_t i = 0; i < 4; ++i)
    if (reply.element[i]->type != REDIS_REPLY_INTEGER) return std::nullopt;
  WaitAttemptReply read;
  read.publish_denied = reply.element[2]->integer == 1;
  read.token_in_use = reply.element[0]->integer < 0;
  read.acquired = reply.element[0]->integer == 1;
  if (read.acquired) {
    read.fence = static_cast<std::uint64_t>(reply.element[1]->integer);
  } else if (!read.token_in_use) {
    read.pttl = reply.element[1]->integer;
    read.ahead = reply.element[3]->integer;
  }
  return read;
}

}  // namespace lockon::detail
