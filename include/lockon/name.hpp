// lockon/name.hpp — what a lock name may be, checked in one place for every
// primitive (Lock, Redlock, MultiLock, ReadWriteLock, Semaphore, AsyncLock,
// lock_on's keys and the `lockon` CLI).
//
// A name is any non-empty byte string of at most kMaxNameBytes bytes. It is
// the lock's Redis key (lockon adds short companion keys such as "{name}:sh"
// and wake-up channels "{name}:wake:<id>", each a few dozen bytes longer).
//
// Why a bound: every request about a lock carries its name, several times
// (keys, channels, script arguments), and every deadline assumes those
// requests are small. A 32 MiB name made a release outlive its socket
// timeout (TimeoutError after ~5 s, the key left held for its TTL) and a 2 s
// async_try_lock_for return after ~8 s. Redis itself accepts keys up to
// 512 MB, so without this check nothing would refuse such a name.
//
// Why 64 KiB: far above any useful name (lock_on's keys are a prefix and a
// 32-digit hash, under 100 bytes; a URL or a file path used as a name is a
// few KiB at most; Linux limits one command-line argument to 128 KiB), and
// small enough that the requests carrying it stay well inside the default
// socket timeout on any network (a release moves a few hundred KiB at most).
#pragma once

#include <cstddef>
#include <string_view>

namespace lockon {

/// The longest lock name lockon accepts, in bytes (64 KiB).
inline constexpr std::size_t kMaxNameBytes = 64 * 1024;

/// Throws ConfigError (nothing sent) unless `name` is a valid lock name:
/// non-empty and at most kMaxNameBytes bytes. `what` names the caller in
/// the message ("lock", "semaphore", "MultiLock"...); the message gives the
/// name's size and its first bytes, never the whole name.
void validate_name(std::string_view name, std::string_view what);

}  // namespace lockon
