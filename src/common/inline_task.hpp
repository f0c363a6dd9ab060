// InlineTask<T>: the blocking port's coroutine. An algorithm written once as
// a coroutine template over a port (Port::Task<T>) runs as asio::awaitable
// on the Asio port and as InlineTask on the blocking one, where every step
// is a plain blocking call: the coroutine runs to its end inside the call
// that made it (eager start, every co_await ready at once) — no thread hop,
// no scheduler, no Asio in liblockon.
//
// Invariants: a task is finished when its maker returns; awaiting one never
// suspends (await_suspend terminates: an awaitable that would suspend has no
// place on the blocking port); its result or exception is taken once.
#pragma once

#include <coroutine>
#include <exception>
#include <type_traits>
#include <utility>
#include <variant>

namespace lockon::detail {

template <class T>
class InlineTask;

namespace inline_task {
// The promise's result: the value (none for T = void) or the exception.
template <class T>
struct Result {
  std::variant<std::monostate, T, std::exception_ptr> value;
  void return_value(T result) { value.template emplace<1>(std::move(result)); }
  T take() {
    if (value.index() == 2) std::rethrow_exception(std::get<2>(value));
    return std::move(std::get<1>(value));
  }
};
template <>
struct Result<void> {
  std::exception_ptr failure;
  void return_void() noexcept {}
  void take() {
    if (failure) std::rethrow_exception(failure);
  }
};
}  // namespace inline_task

template <class T>
class [[nodiscard]] InlineTask {
 public:
  struct promise_type : inline_task::Result<T> {
    InlineTask get_return_object() noexcept {
      return InlineTask(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_never initial_suspend() const noexcept { return {}; }
    std::suspend_always final_suspend() const noexcept { return {}; }  // kept for get()
    void unhandled_exception() noexcept {
      if constexpr (std::is_void_v<T>)
        this->failure = std::current_exception();
      else
        this->value.template emplace<2>(std::current_exception());
    }
  };

  InlineTask(InlineTask&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  InlineTask& operator=(InlineTask&&) = delete;
  ~InlineTask() {
    if (handle_) handle_.destroy();
  }

  /// The result, or the exception the coroutine ended with.
  T get() {
    if (!handle_ || !handle_.done()) std::terminate();  // suspended: not a blocking-port coroutine
    return handle_.promise().take();
  }

  // Awaited from another InlineTask: finished already.
  bool await_ready() const noexcept { return true; }
  [[noreturn]] void await_suspend(std::coroutine_handle<>) const noexcept { std::terminate(); }
  T await_resume() { return get(); }

 private:
  explicit InlineTask(std::coroutine_handle<promise_type> handle) noexcept : handle_(handle) {}
  std::coroutine_handle<promise_type> handle_;
};

}  // namespace lockon::detail
