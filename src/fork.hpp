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

#include <cstdint>

namespace lockon::detail {

/// 0 in the process that first loaded lockon; incremented in every child
/// right after fork() (a pthread_atfork handler). Cheap: one atomic load.
std::uint64_t fork_generation() noexcept;

}  // namespace lockon::detail
