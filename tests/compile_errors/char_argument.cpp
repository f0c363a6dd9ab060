// expect: lock_argument_is_encodable<1, char>
// expect: T = char.
// expect: single character, ambiguous
// A char at lock position 1: the error names the position, the type and why.
#include "lockon/locker.hpp"
void use(const lockon::RedisLocker& locker) {
  auto locked = locker.lock_on<0, 1>("f", [](int, char) {});
  (void)locked;
}
