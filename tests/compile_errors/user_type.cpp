// expect: lock_argument_is_encodable<0, Account>
// expect: T = Account.
// expect: has no encoding for. specialize lockon::ArgEncoder<T>
#include "lockon/locker.hpp"
struct Account {
  int id;
};
void use(const lockon::RedisLocker& locker) {
  auto locked = locker.lock_on<0>("f", [](Account) {});
  (void)locked;
}
