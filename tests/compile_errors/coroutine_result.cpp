// expect: returns a coroutine or an awaitable
// A lazy task returned by the wrapped callable would run its body after the
// lock is released (review, session 21: the body ran with the key free).
#include <coroutine>

#include "lockon/locker.hpp"

struct Task {
  struct promise_type {
    Task get_return_object() { return {}; }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() {}
  };
};

void use(const lockon::RedisLocker& locker) {
  auto locked = locker.lock_on<0>("f", [](int) -> Task { co_return; });
  locked(1);
}
