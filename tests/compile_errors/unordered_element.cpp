// expect: lock_argument_is_encodable<1, std::vector<std::unordered_map<int, int>
// expect: T = std::unordered_map<int, int>.
// expect: unordered container, which has no canonical order
// The culprit is found inside a container.
#include <unordered_map>
#include <vector>
#include "lockon/locker.hpp"
void use(const lockon::RedisLocker& locker) {
  auto locked = locker.lock_on<0, 1>("f", [](int, std::vector<std::unordered_map<int, int>>) {});
  (void)locked;
}
