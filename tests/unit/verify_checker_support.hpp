// unit/verify_checker_support.hpp — shared by the checker's unit tests
// (test_verify_checker.cpp, test_verify_failover_checker.cpp): the time
// origin of their hand-written histories, and the kinds of the violations
// the checker found.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checker.hpp"

namespace lockon::verify {

/// An arbitrary monotonic origin (ns) for the records of a hand-written history.
inline constexpr std::int64_t kT0 = 1'000'000 * kMs;

/// The kinds of `findings`' violations, in the order found.
inline std::vector<std::string> kinds(const Findings& findings) {
  std::vector<std::string> out;
  for (const auto& v : findings.violations) out.push_back(v.kind);
  return out;
}

}  // namespace lockon::verify
