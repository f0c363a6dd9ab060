// lockon::Semaphore: one permit ('p' of `permits`) per object;
// shared/shared_holder.hpp does the work.
#include "lockon/semaphore.hpp"

#include "shared/shared_holder.hpp"

namespace lockon {

namespace {
long long checked_permits(long long permits, const std::string& name) {
  if (permits < 1) throw ConfigError("semaphore '" + name + "': permits must be >= 1");
  return permits;
}
}  // namespace

Semaphore::Semaphore(Client client, std::string name, long long permits, SemaphoreOptions options)
    : permits_(checked_permits(permits, name)),
      holder_(std::make_unique<detail::SharedHolder>(std::move(client), std::move(name), std::move(options), 'p',
                                                     permits, "semaphore")) {}

Semaphore::~Semaphore() = default;  // the holder releases itself

void Semaphore::acquire() {
  if (!acquire_until(Clock::time_point::max()))
    throw LockError("semaphore '" + name() + "': the acquisition ended without a permit", name());
}
bool Semaphore::try_acquire() { return acquire_until(Clock::time_point::min()); }
bool Semaphore::acquire_until(Clock::time_point deadline) { return holder_->acquire_until(deadline); }
void Semaphore::release() noexcept { holder_->unlock(); }
void Semaphore::release_or_throw() { holder_->release(); }
bool Semaphore::held() noexcept { return holder_->held(); }
bool Semaphore::lost() const noexcept { return holder_->lost(); }
std::stop_token Semaphore::lost_token() const noexcept { return holder_->lost_token(); }
std::exception_ptr Semaphore::last_unlock_error() const noexcept { return holder_->last_unlock_error(); }
const std::string& Semaphore::name() const noexcept { return holder_->name(); }

}  // namespace lockon
