// tests/fuzz/fuzz_check.hpp — how a fuzz target reports a violated property:
// print what and abort, so libFuzzer records the input as a crash.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace lockon::fuzz {

[[noreturn]] inline void fail(std::string_view what, std::string_view detail = {}) {
  std::fprintf(stderr, "FUZZ PROPERTY VIOLATED: %.*s\n", static_cast<int>(what.size()), what.data());
  if (!detail.empty()) std::fprintf(stderr, "  detail: %.*s\n", static_cast<int>(detail.size()), detail.data());
  std::abort();
}

inline void check(bool ok, std::string_view what, std::string_view detail = {}) {
  if (!ok) fail(what, detail);
}

}  // namespace lockon::fuzz
