// Unguessable identifiers from OpenSSL's CSPRNG.
#pragma once

#include <cstddef>
#include <string>

namespace lockon::detail {

/// `bytes` random bytes from RAND_bytes, as lowercase hex (default: 128 bits).
/// Throws lockon::Error if the CSPRNG fails (never falls back to a weak one).
std::string random_hex(std::size_t bytes = 16);

/// The same, written over `out` (its capacity reused: a lock's token is
/// redrawn at every acquisition without an allocation).
void assign_random_hex(std::string& out, std::size_t bytes = 16);

}  // namespace lockon::detail
