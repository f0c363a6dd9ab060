// lockon::Lock — a held lease moved by hand: extend(), reacquire(), and
// what they share (the checks before, the owned-or-lost verdict after, the
// watch of a lease that is not renewed). lock.cpp has the rest.
#include "lock/lock_impl.hpp"

namespace lockon {

namespace {

// However an extension ends, the lease's end may have moved (earlier too: a
// replaced ttl, an unknown outcome); without renewal the watchdog must watch
// the new one. (A template: Lock::Impl is private to Lock, and is named
// here only from its own members.)
template <class Impl>
class RewatchLeaseEnd {
 public:
  explicit RewatchLeaseEnd(Impl& impl) : impl_(impl) {}
  RewatchLeaseEnd(const RewatchLeaseEnd&) = delete;
  RewatchLeaseEnd& operator=(const RewatchLeaseEnd&) = delete;
  ~RewatchLeaseEnd() { impl_.rewatch_lease_end(); }

 private:
  Impl& impl_;
};

}  // namespace

void Lock::Impl::extend(std::chrono::milliseconds additional, bool replace_ttl) {
  require_extendable("extend");
  const RewatchLeaseEnd rewatch(*this);
  if (additional.count() <= 0) throw ConfigError("extend lock '" + state_.name + "': additional time must be positive");
  if (additional.count() > (1LL << 47))
    throw ConfigError("extend lock '" + state_.name + "': additional time exceeds Redis' limit (2^47 ms)");
  const std::string ms = std::to_string(additional.count());
  const std::array<std::string_view, 4> args{state_.token, ms, replace_ttl ? "1" : "0", ttl_text_};
  // The proven end before sending: a renewal completing meanwhile may have
  // run before or after the extension on the server.
  const auto proven_end = state_.lease->lease_end();
  const auto sent_at = Clock::now();
  // A replaced ttl may be shorter: a renewal in flight meanwhile must not
  // set the end past it (LeaseSignal::begin_shortening).
  const detail::LeaseSignal::Shortening shortening(*state_.lease, replace_ttl);
  ReplyPtr reply;
  try {
    reply = calls_.run1_as_process(detail::scripts::extend(), args, "extend lock");
  } catch (const IoError&) {
    // The outcome is unknown: a replaced ttl may have shortened the lease
    // to `additional` after we sent. lost() must not wait for the old end
    // (found by review, session 18).
    if (replace_ttl && detail::outcome_unknown(std::current_exception()) && !state_.lease->lost())
      state_.lease->set_lease_end(std::min(proven_end, detail::add_saturating(sent_at, additional)));
    throw;
  }
  check_owned(reply, "extend");
  // What we can prove: the new expiry is at least the old proven end plus
  // `additional`, or (replace) at least `additional` after we sent.
  const auto end = replace_ttl ? detail::add_saturating(sent_at, additional)
                               : detail::add_saturating(proven_end, additional);
  if (!state_.lease->lost()) state_.lease->set_lease_end(end);
}

void Lock::Impl::reacquire() {
  require_extendable("reacquire");
  const RewatchLeaseEnd rewatch(*this);
  const std::array<std::string_view, 3> args{state_.token, ttl_text_, "0"};
  const auto proven_end = state_.lease->lease_end();
  const auto sent_at = Clock::now();
  ReplyPtr reply;
  try {
    reply = calls_.run1_as_process(detail::scripts::renew(), args, "reacquire lock");
  } catch (const IoError&) {
    // The outcome is unknown: the ttl may have been set back to `ttl`
    // after we sent (after a longer extend()); as extend(replace).
    if (detail::outcome_unknown(std::current_exception()) && !state_.lease->lost())
      state_.lease->set_lease_end(std::min(proven_end, detail::add_saturating(sent_at, state_.options.ttl)));
    throw;
  }
  check_owned(reply, "reacquire");
  if (!state_.lease->lost()) state_.lease->set_lease_end(detail::add_saturating(sent_at, state_.options.ttl));
}

void Lock::Impl::rewatch_lease_end() noexcept {
  if (state_.options.auto_renew || state_.options.no_expiry || !state_.held || !state_.lease) return;
  try {
    auto watch = detail::Watchdog::instance().watch_lease_end(state_.name, state_.lease);
    stop_renewal();
    renewal_ = std::move(watch);
  } catch (...) {
    // Out of memory: the watch of the old end stays (late if it moved earlier).
  }
}

void Lock::Impl::require_extendable(const char* what) {
  if (!state_.held) throw LockError(std::string("cannot ") + what + " an unlocked lock '" + state_.name + "'", state_.name);
  if (state_.options.no_expiry)
    throw LockError(std::string("cannot ") + what + " lock '" + state_.name + "': it has no expiry", state_.name);
}

void Lock::Impl::check_owned(const ReplyPtr& reply, const char* what) {
  if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 1) return;
  if (reply->type == REDIS_REPLY_INTEGER && reply->integer == -1)
    throw LockError(std::string("cannot ") + what + " lock '" + state_.name + "': the key has no expiry", state_.name);
  // The key expired or another owner holds it: the lease is lost, and
  // lost(), lost_token() and on_lost say so now, not at the old end (found
  // by review, session 18).
  state_.lease->declare_lost(LossReason::taken, "the key expired or is held by another owner");
  throw LockNotOwned(std::string("cannot ") + what + " lock '" + state_.name + "': it is no longer owned", state_.name);
}

}  // namespace lockon
