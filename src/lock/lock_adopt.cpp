// Lock::Impl::adopt: a Lock takes over an acquisition that MultiLock's
// single script made for several keys at once (src/multi/one_script.cpp).
// After it, release, extend, renewal and loss detection are the Lock's own.
#include "lock/lock_impl.hpp"

namespace lockon {

bool Lock::Impl::adopt(const std::string& token, const std::string& record, std::uint64_t fence,
                       Clock::time_point sent_at) {
  renewal_.reset();  // a parent's renewal entry, in a forked child: never touched
  token_ = token;
  record_ = record;
  Attempt attempt;
  attempt.acquired = true;
  attempt.fence = fence;
  attempt.sent_at = sent_at;
  // The same proof as a grant of the Lock's own: a lease counted from the
  // script's send time, confirmed by a round trip when half of it is gone.
  if (!confirm_lease(attempt)) return false;
  note_contention(false);
  return on_acquired(attempt);
}

}  // namespace lockon
