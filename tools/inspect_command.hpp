// tools/inspect_command.hpp — operator commands on a lock key:
//
//   lockon status KEY           held or free, remaining TTL, fence, token prefix
//   lockon release --force KEY  deletes a stuck lock after printing what it held
//
// With several --url values every node is shown, and "held" means held on a
// majority (as for Redlock). Output goes to stdout, errors to stderr.
#pragma once

#include <string>
#include <string_view>

#include "cli_options.hpp"

namespace lockon::cli {

/// The fence counter that accompanies lock key `key`: "{KEY}:fence", or
/// "KEY:fence" when KEY already has a non-empty hash tag.
///
/// This mirrors the library's companion-key rule (detail::companion_key in
/// src/protocol/lock_scripts.cpp, also documented in lockon/redlock.hpp): the tool may
/// only use the public headers, so the tiny rule is restated here, and the
/// integration tests check it against keys written by the library.
std::string fence_key(std::string_view key);

int status_command(const InspectOptions& options);
int release_command(const InspectOptions& options);

}  // namespace lockon::cli

namespace lockon::cli {

/// `lockon list [PATTERN]`: the locks currently held (keys with a holder
/// record), bounded by options.limit. options.key is the pattern.
int list_command(const InspectOptions& options);

}  // namespace lockon::cli
