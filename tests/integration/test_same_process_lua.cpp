// integration/test_same_process_lua.cpp — the scripts' `same_process(a, b)`
// (common/token.hpp) run by a real server on a table of ids: lock tokens,
// subscriber ids and "-.<nonce>" of this process and of another, custom
// tokens, near-misses of the nonce form (11 or 13 hex digits, no dot, upper
// case, characters that are not hex), short strings and nil. The helper was
// rewritten for speed (suffix comparison first); it must answer exactly as
// the pattern-matching definition it replaced, kept here as the reference.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/token.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

// The definition of sessions 14-15: two pattern matches per call.
constexpr const char* kReferenceSameProcess =
    "local function same_process(a, b)\n"
    "  if not a or not b then return false end\n"
    "  if a == b then return true end\n"
    "  local na = string.match(a, '%.(%x+)$')\n"
    "  return na ~= nil and #na == 12 and na == string.match(b, '%.(%x+)$')\n"
    "end\n";

// Every ordered pair of ARGV (the empty string stands for nil): "1" or "0"
// per pair, row by row.
constexpr const char* kAllPairs =
    "local ids = {}\n"
    "for i = 1, #ARGV do if ARGV[i] == '' then ids[i] = false else ids[i] = ARGV[i] end end\n"
    "local out = {}\n"
    "for i = 1, #ARGV do\n"
    "  for j = 1, #ARGV do\n"
    "    out[#out + 1] = same_process(ids[i] or nil, ids[j] or nil) and '1' or '0'\n"
    "  end\n"
    "end\n"
    "return table.concat(out)\n";

class SameProcessLua : public ClientTest {
 protected:
  std::string pairs(const std::string& helper, const std::vector<std::string>& ids) {
    std::vector<std::string> args{"EVAL", helper + kAllPairs, "0"};
    args.insert(args.end(), ids.begin(), ids.end());
    const RawReply reply = raw(args);
    EXPECT_FALSE(reply.is_error()) << reply.str;
    return reply.str;
  }
};

TEST_F(SameProcessLua, AnswersAsThePatternMatchingDefinitionOnEveryPair) {
  const std::string token = detail::lock_token();
  const std::string nonce = token.substr(33);
  const std::string subscriber = detail::new_subscriber_id();
  const std::vector<std::string> ids{
      token,
      detail::lock_token(),  // another token of this process
      subscriber,
      "-." + nonce,
      "read:" + token,  // a share's member
      "0123456789abcdef0123456789abcdef.0123456789ab",  // another process
      "fedcba9876543210.0123456789ab",                  // its subscriber
      "-.0123456789ab",
      "my-custom-token",
      "custom.with.dots",
      "x.0123456789a",    // 11 hex digits
      "x.0123456789abc",  // 13 hex digits
      "x0123456789abc",   // 13 characters, no dot
      "x.0123456789AB",   // upper case: hex too
      "y.0123456789AB",
      "x.0123456789ag",   // not hex
      "y.0123456789ag",
      ".0123456789ab",    // the nonce form alone
      "ab",
      "b",
      "",  // nil
  };
  const std::string fast = pairs(LOCKON_LUA_SAME_PROCESS, ids);
  const std::string reference = pairs(kReferenceSameProcess, ids);
  ASSERT_EQ(fast.size(), ids.size() * ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t j = 0; j < ids.size(); ++j)
      EXPECT_EQ(fast[i * ids.size() + j], reference[i * ids.size() + j])
          << "same_process('" << ids[i] << "', '" << ids[j] << "')";
  // The answers that matter, stated: this process's ids match each other,
  // not another process's; a custom token and nil match nothing else.
  const auto at = [&](std::size_t i, std::size_t j) { return fast[i * ids.size() + j] == '1'; };
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t j = 0; j < 5; ++j) EXPECT_TRUE(at(i, j)) << ids[i] << " / " << ids[j];
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t j = 5; j < 8; ++j) EXPECT_FALSE(at(i, j)) << ids[i] << " / " << ids[j];
  EXPECT_TRUE(at(5, 7));
  EXPECT_TRUE(at(13, 14));  // upper-case nonces compare as written
  EXPECT_FALSE(at(15, 16));
  EXPECT_FALSE(at(8, 9));
  EXPECT_TRUE(at(8, 8));
  const std::size_t nil = ids.size() - 1;
  EXPECT_FALSE(at(nil, nil));
  EXPECT_FALSE(at(0, nil));
}

}  // namespace
}  // namespace lockon::test
