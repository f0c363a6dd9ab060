// lockon::ReadWriteLock: two holders of one name, the writer side ('x') and
// the reader side ('s'); shared/shared_holder.hpp does the work.
#include "lockon/read_write_lock.hpp"

#include "shared/shared_holder.hpp"

namespace lockon {

ReadWriteLock::ReadWriteLock(Client client, std::string name, ReadWriteLockOptions options)
    : writer_(std::make_unique<detail::SharedHolder>(client, name, options, 'x', 0, "read-write lock")),
      reader_(std::make_unique<detail::SharedHolder>(std::move(client), std::move(name), std::move(options), 's', 0,
                                                     "read-write lock")) {}

ReadWriteLock::~ReadWriteLock() = default;  // each holder releases itself

bool ReadWriteLock::acquire(bool shared, Clock::time_point deadline) {
  // No upgrade or downgrade: holding one side and waiting for the other
  // would wait for ourselves.
  if (writer_->held() || reader_->held())
    throw LockError("read-write lock '" + name() + "' is already held by this object (" +
                        (writer_->held() ? "exclusively" : "shared") + ")",
                    name());
  detail::SharedHolder& side = shared ? *reader_ : *writer_;
  const bool acquired = side.acquire_until(deadline);
  if (acquired) last_ = &side;
  return acquired;
}

void ReadWriteLock::lock() {
  if (!acquire(false, Clock::time_point::max()))
    throw LockError("read-write lock '" + name() + "': the acquisition ended without the lock", name());
}
bool ReadWriteLock::try_lock() { return acquire(false, Clock::time_point::min()); }
void ReadWriteLock::unlock() noexcept { writer_->unlock(); }
void ReadWriteLock::lock_shared() {
  if (!acquire(true, Clock::time_point::max()))
    throw LockError("read-write lock '" + name() + "': the acquisition ended without a share", name());
}
bool ReadWriteLock::try_lock_shared() { return acquire(true, Clock::time_point::min()); }
void ReadWriteLock::unlock_shared() noexcept { reader_->unlock(); }

void ReadWriteLock::release() {
  if (writer_->held()) return writer_->release();
  reader_->release();
}

bool ReadWriteLock::held() noexcept { return writer_->held(); }
bool ReadWriteLock::held_shared() noexcept { return reader_->held(); }
bool ReadWriteLock::lost() const noexcept { return last_ != nullptr && last_->lost(); }
std::stop_token ReadWriteLock::lost_token() const noexcept { return last_ ? last_->lost_token() : std::stop_token(); }
std::exception_ptr ReadWriteLock::last_unlock_error() const noexcept {
  return last_ ? last_->last_unlock_error() : nullptr;
}
const std::string& ReadWriteLock::name() const noexcept { return writer_->name(); }

}  // namespace lockon
