// Holder records: who holds a lock and who waits for it, for `lockon status`.
//
// Record text: "<token first 8>|<host>|<pid>|<process start ms>|<label>|<since ms>"
// (ms since 1970; host and label never contain '|' or control characters).
//   companion(K, "who")   STRING: the holder's record, with K's expiry;
//                         written NX by the fast path in the same pipeline as
//                         the SET NX (a failed attempt never overwrites the
//                         holder's), by the waiter's script, or by a hand-over
//                         (from the waiter's entry below, `since` restamped
//                         with the server's clock); deleted by release.
//   companion(K, "qwho")  HASH waiter id -> record (since = when it queued),
//                         beside the queue (whose entry format is unchanged,
//                         so older clients still parse it).
// The token prefix lets a reader tell a record from a stale one.
#pragma once

#include <string>
#include <string_view>

namespace lockon::detail {

/// This process's record text for `token`, `label` (sanitized) and now.
std::string holder_record(std::string_view token, std::string_view label);
/// The same, written over `out` (its capacity reused).
void assign_holder_record(std::string& out, std::string_view token, std::string_view label);

/// Wall-clock ms when this process started (/proc/self/stat + boot time),
/// or when it first asked (no /proc).
long long process_start_ms();

}  // namespace lockon::detail
