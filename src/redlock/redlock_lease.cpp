#include "redlock/redlock_lease.hpp"

#include <algorithm>
#include <array>
#include <string_view>

namespace lockon::detail {
namespace {

std::chrono::milliseconds ceil_ms(RedlockLease::Clock::duration d) {
  return std::chrono::ceil<std::chrono::milliseconds>(d);
}

}  // namespace

RedlockLease::Extension RedlockLease::extend(const std::string& token, ExtendMode mode,
                                             std::chrono::milliseconds amount) {
  using std::chrono::milliseconds;
  std::lock_guard guard(update_);
  const auto start = Clock::now();
  const auto old_deadline = validity_deadline();
  Clock::time_point new_deadline;
  milliseconds missing_px{};
  if (mode == ExtendMode::add) {
    // The nodes' keys gain `amount`; the drift of the added time is
    // subtracted too (the fixed 2 ms already was).
    new_deadline = old_deadline + amount - (drift_allowance(amount, drift_factor) - milliseconds(2));
    // A re-created key must outlive the new deadline in the node's clock.
    const auto span = std::max(new_deadline - start, Clock::duration::zero());
    missing_px = ceil_ms(span) + ceil_ms(drift_allowance(ceil_ms(span), 2 * drift_factor));
  } else {
    new_deadline = start + amount - drift_allowance(amount, drift_factor);
    missing_px = amount;
  }
  const std::string ms = std::to_string(amount.count());
  const std::string px = std::to_string(std::max<long long>(missing_px.count(), 1));
  const std::string_view mode_text = mode == ExtendMode::add ? "add" : mode == ExtendMode::set ? "set" : "grow";
  const std::array<std::string_view, 1> keys{name};
  const std::array<std::string_view, 4> args{token, ms, mode_text, px};
  // Decided once a majority extended: a frozen minority's keys keep their
  // old expiry, which the validity (counted on the majority) never relied on.
  const Voter extended = [](const redisReply& r) {
    return r.type == REDIS_REPLY_INTEGER && (r.integer == 1 || r.integer == 2) ? Vote::yes : Vote::no;
  };
  auto replies = nodes->script(redlock_scripts::extend(), keys, args, "redlock extend", Clock::time_point::max(), extended);
  const Tally tally = settle(*nodes, replies, NodeOperation::extend, token, [](std::size_t, const redisReply& r) {
    if (r.type != REDIS_REPLY_INTEGER) return unexpected_reply();
    if (r.integer == 1) return Verdict{NodeOutcome::ok, "extended"};
    if (r.integer == 2) return Verdict{NodeOutcome::ok, "key was missing; re-created with our token"};
    return Verdict{NodeOutcome::refused, "held by another owner"};
  });
  const auto end = Clock::now();
  if (tally.ok >= nodes->quorum()) {
    if (mode == ExtendMode::grow) new_deadline = std::max(new_deadline, old_deadline);
    // Past the old deadline the keys may have lapsed and someone else may
    // have held the lock in between: re-created keys prove nothing.
    if (end >= old_deadline || end >= new_deadline)
      return {ExtendResult::late,
              "the extension was confirmed only after the validity had ended; extended on " + tally.summary(*nodes)};
    set_deadline(new_deadline);
    return {ExtendResult::extended, {}};
  }
  if (tally.refused > nodes->size() - nodes->quorum())
    return {ExtendResult::taken, "another owner holds the key on " + std::to_string(tally.refused) + " of " +
                                     std::to_string(nodes->size()) + " nodes"};
  return {ExtendResult::unreachable, "extended on " + tally.summary(*nodes)};
}

Tally RedlockLease::release(const std::string& token, Clock::time_point not_after, bool until_decided) const {
  const std::array<std::string_view, 1> keys{name};
  const std::array<std::string_view, 1> args{token};
  const Voter deleted = [](const redisReply& r) {
    return r.type == REDIS_REPLY_INTEGER && r.integer == 1 ? Vote::yes : Vote::no;
  };
  auto replies = nodes->script(redlock_scripts::release(), keys, args, "redlock release", not_after,
                               until_decided ? deleted : Voter{});
  // A node the release was never sent to because its connection was still
  // being dialed when the others decided would keep our key until its TTL:
  // retried in the background until then. (Sent ones run there even if not
  // waited for; a node that refused the connection is left to the TTL, so a
  // dead node cannot keep the shared clean-up thread busy.)
  const auto expired_by = Clock::now() + ttl;
  for (std::size_t k = 0; k < replies.size(); ++k)
    if (replies[k].abandoned && !replies[k].sent)
      nodes->run_in_background(k, redlock_scripts::release(), {name}, {token}, expired_by);
  return settle(*nodes, replies, NodeOperation::release, token, [](std::size_t, const redisReply& r) {
    if (r.type != REDIS_REPLY_INTEGER) return unexpected_reply();
    if (r.integer == 1) return Verdict{NodeOutcome::ok, "released"};
    if (r.integer == 0) return Verdict{NodeOutcome::refused, "not held (the key expired or was never set)"};
    return Verdict{NodeOutcome::refused, "held by another owner"};
  });
}

}  // namespace lockon::detail
