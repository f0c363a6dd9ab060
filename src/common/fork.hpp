// Which process image lockon's state belongs to.
//
// After fork() the child has copies of every lockon object but only the
// forking thread: the watchdog's, subscriber's and clean-up threads do not
// exist there, their mutexes may be frozen in a locked state, and pooled
// sockets are shared with the parent (a request of the child could read the
// parent's reply). Objects that own threads or sockets remember the
// generation they were made in and, on first use in a child, abandon the
// parent's copy (never destroyed: that would join threads that don't exist
// or take frozen mutexes) and start fresh.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

namespace lockon::detail {

/// 0 in the process that first loaded lockon; incremented in every child
/// right after fork() (a pthread_atfork handler). Cheap: one atomic load.
std::uint64_t fork_generation() noexcept;

/// A T per process image: get() returns this process's, building a fresh
/// one with `make()` on first use in a forked child. The parent's copy is
/// abandoned in the child — never used, never destroyed (its threads do not
/// exist there and its mutexes may be frozen locked). Lock-free: several
/// threads of a child may race; one fresh T wins, the others are deleted.
template <class T>
class ForkLocal {
 public:
  template <class Make>
  explicit ForkLocal(Make&& make) : slot_(new Slot{std::forward<Make>(make)(), fork_generation()}) {}
  ~ForkLocal() {
    Slot* current = slot_.load();
    if (current->generation == fork_generation()) delete current;
  }
  ForkLocal(const ForkLocal&) = delete;
  ForkLocal& operator=(const ForkLocal&) = delete;

  template <class Make>
  T& get(Make&& make) {
    Slot* current = slot_.load(std::memory_order_acquire);
    const auto generation = fork_generation();
    if (current->generation == generation) [[likely]] return *current->value;
    auto* fresh = new Slot{make(), generation};
    while (current->generation != generation) {
      if (slot_.compare_exchange_weak(current, fresh, std::memory_order_acq_rel)) return *fresh->value;
    }
    delete fresh;  // another thread of the child was first
    return *current->value;
  }
  /// This process's T if it was built here, else null (a child that never
  /// used it).
  T* here() noexcept {
    Slot* current = slot_.load(std::memory_order_acquire);
    return current->generation == fork_generation() ? current->value.get() : nullptr;
  }

 private:
  struct Slot {
    std::unique_ptr<T> value;
    std::uint64_t generation;
  };
  std::atomic<Slot*> slot_;
};

}  // namespace lockon::detail
