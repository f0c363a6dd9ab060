// tools/exit_codes.hpp — the `lockon` tool's exit statuses, in one place.
//
// `lockon run` exits with its COMMAND's status when the command ran (128+N if
// it died of signal N). Its own outcomes use the values below; those ≥ 64
// follow sysexits(3) where one fits. docs/cli.md documents the same table,
// and exit_code_table() prints it at the end of --help.
#pragma once

#include <string>

namespace lockon::cli {

namespace exit_code {

/// Everything went well (status/key/release), or COMMAND exited 0.
inline constexpr int ok = 0;
/// -n found the lock held (as flock(1)); -E/--conflict-exit-code changes it.
inline constexpr int conflict_default = 1;
/// Bad command line or configuration (EX_USAGE): unknown option, bad URL or
/// duration, `release` without --force...
inline constexpr int usage = 64;
/// Not a lock: the key or a companion key holds a type lockon never writes there (EX_DATAERR).
inline constexpr int not_a_lock = 65;
/// Redis could not be reached, or a Redlock majority could not be reached
/// (EX_UNAVAILABLE).
inline constexpr int unavailable = 69;
/// An unexpected internal error (EX_SOFTWARE).
inline constexpr int internal = 70;
/// -w/--wait ran out while someone else held the lock; `release --force`
/// found the lock changed hands meanwhile (EX_TEMPFAIL: try again).
inline constexpr int timed_out = 75;
/// Redis refused our credentials (EX_NOPERM).
inline constexpr int auth = 77;
/// The lock was lost while COMMAND ran (expired, deleted or taken, or Redis
/// became unreachable until the lease lapsed), with --on-lost=term.
/// lockon-specific, just past the sysexits range.
inline constexpr int lost = 79;
/// COMMAND was found but could not be executed (as in the shell).
inline constexpr int cannot_execute = 126;
/// COMMAND was not found (as in the shell).
inline constexpr int not_found = 127;
/// COMMAND died of signal N: 128 + N (as in the shell).
inline constexpr int signal_base = 128;

}  // namespace exit_code

/// The exit status table, formatted for the end of --help.
std::string exit_code_table();

}  // namespace lockon::cli
