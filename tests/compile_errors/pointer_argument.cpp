// expect: lock_argument_is_encodable<0, const int\*>
// expect: is a pointer: an address means nothing
#include "lockon/locker.hpp"
void use(const lockon::RedisLocker& locker) {
  auto locked = locker.lock_on<0>("f", [](const int*) {});
  (void)locked;
}
