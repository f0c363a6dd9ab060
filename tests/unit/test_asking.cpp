// unit/test_asking.cpp — which commands of a pipeline redirected by ASK get
// an ASKING in front (client/asking.hpp): every command outside a
// transaction, MULTI itself, nothing queued inside MULTI...EXEC.
#include <gtest/gtest.h>

#include <array>
#include <string_view>
#include <vector>

#include "client/asking.hpp"

namespace lockon::detail {
namespace {

std::vector<bool> prefixes(const std::vector<std::vector<std::string_view>>& commands) {
  AskingPrefixer prefixer;
  std::vector<bool> result;
  for (const auto& command : commands) result.push_back(prefixer.needs_asking(command));
  return result;
}

TEST(AskingPrefixer, EveryPlainCommandGetsItsOwn) {
  EXPECT_EQ(prefixes({{"SET", "k", "t", "NX"}, {"SET", "who", "r", "NX"}, {"WAIT", "1", "100"}}),
            (std::vector<bool>{true, true, true}));
}

TEST(AskingPrefixer, ATransactionGetsOneBeforeMultiAndTheCommandsAfterExecTheirOwn) {
  EXPECT_EQ(prefixes({{"MULTI"}, {"SET", "k", "t"}, {"INCR", "f"}, {"EXEC"}, {"SET", "who", "r"}}),
            (std::vector<bool>{true, false, false, false, true}));
  EXPECT_EQ(prefixes({{"multi"}, {"SET", "k", "t"}, {"discard"}, {"GET", "k"}}),
            (std::vector<bool>{true, false, false, true}))
      << "case-insensitive; DISCARD ends the transaction too";
}

TEST(AskingPrefixer, EmptyCommandsAndLookAlikesChangeNothing) {
  EXPECT_EQ(prefixes({{}, {"MULTIX"}, {"GET", "MULTI"}, {"EXECUTE"}}), (std::vector<bool>{true, true, true, true}));
}

}  // namespace
}  // namespace lockon::detail
