// The fast path's acquisition (SET K token NX [PX ttl] GET, or the fenced
// script scripts::fenced_acquire()): its reply, read here only (the core's
// fast path serves the blocking Lock and AsyncLock).
//
// SET ... GET answers nil when it won, else K's previous value. The fenced
// script answers {1, fence} when it won, {0, previous} when K is held, and
// {0, previous, fence} when K held our own token (the fence K was given).
// K holding our own token is the one way to learn that a first request whose
// reply was lost won: with a random token that is ours; with a token the
// caller chose it means another holder uses it (misuse, the caller's error).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "client/hiredis_handles.hpp"

namespace lockon::detail {

struct AcquireReply {
  enum class Outcome {
    won,           // K is ours now
    busy,          // K is held by someone else (or is not a string: WRONGTYPE is an error reply)
    token_in_use,  // K holds this caller-chosen token for someone else
  };
  Outcome outcome = Outcome::busy;
  std::uint64_t fence = 0;  // fenced and won
};

namespace acquire_reply {
inline AcquireReply::Outcome previous_holder(const redisReply& previous, std::string_view token,
                                             bool random_token) noexcept {
  if (previous.type != REDIS_REPLY_STRING || std::string_view(previous.str, previous.len) != token)
    return AcquireReply::Outcome::busy;
  return random_token ? AcquireReply::Outcome::won : AcquireReply::Outcome::token_in_use;
}
}  // namespace acquire_reply

/// SET ... GET's reply (not an error reply: the caller checks that first).
inline AcquireReply read_set_acquire(const redisReply& reply, std::string_view token, bool random_token) noexcept {
  if (reply.type == REDIS_REPLY_NIL) return {AcquireReply::Outcome::won, 0};
  return {acquire_reply::previous_holder(reply, token, random_token), 0};
}

/// The fenced script's reply (not an error reply), or nullopt if it is not
/// one of the three shapes above (the caller's ProtocolError).
inline std::optional<AcquireReply> read_fenced_acquire(const redisReply& reply, std::string_view token,
                                                       bool random_token) noexcept {
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements < 2 || reply.element[0]->type != REDIS_REPLY_INTEGER)
    return std::nullopt;
  if (reply.element[0]->integer == 1) {
    if (reply.element[1]->type != REDIS_REPLY_INTEGER) return std::nullopt;
    return AcquireReply{AcquireReply::Outcome::won, static_cast<std::uint64_t>(reply.element[1]->integer)};
  }
  const AcquireReply::Outcome outcome = acquire_reply::previous_holder(*reply.element[1], token, random_token);
  if (outcome != AcquireReply::Outcome::won) return AcquireReply{outcome, 0};
  if (reply.elements < 3 || reply.element[2]->type != REDIS_REPLY_INTEGER) return std::nullopt;
  return AcquireReply{AcquireReply::Outcome::won, static_cast<std::uint64_t>(reply.element[2]->integer)};
}

}  // namespace lockon::detail
