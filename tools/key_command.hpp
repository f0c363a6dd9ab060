// tools/key_command.hpp — `lockon key`: the Redis key `lock_on` derives.
//
//   lockon key billing::charge --arg int:42 --arg str:EUR
//
// prints make_lock_key(prefix, function_digest(NAME), args) where args are
// encoded exactly as encode_args(...) encodes the same values in C++: a tuple
// of the --arg values in order (lockon/encoding.hpp, format v1).
#pragma once

#include <string>
#include <string_view>

#include "cli_options.hpp"
#include "lockon/encoding.hpp"

namespace lockon::cli {

/// Appends one "TYPE:VALUE" argument. TYPE is int (signed 64-bit), uint
/// (unsigned 64-bit), str (the rest of the text, verbatim, colons included),
/// bool (true/false/1/0) or float (a C++ double; NaN is rejected). Integers
/// compare by value, so int:5 and uint:5 are the same argument, as in C++.
/// Throws ConfigError naming the problem.
void add_typed_arg(Encoder& encoder, std::string_view spec);

/// The key for `options` (ConfigError for bad input).
std::string derive_key(const KeyOptions& options);

/// Prints derive_key() and a newline to stdout; returns the exit status.
int key_command(const KeyOptions& options);

}  // namespace lockon::cli
