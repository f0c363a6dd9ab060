// The CLI's second line of defence: what it writes to stderr goes through a
// Redactor that knows the passwords and the lock token (tools/report.hpp).
#include <gtest/gtest.h>

#include <string>

#include "report.hpp"

namespace {

using lockon::cli::Redactor;

TEST(CliRedactor, ATokenIsShownByItsFirstCharactersOnly) {
  Redactor redactor;
  redactor.add_token("0123456789abcdef0123456789abcdef");
  EXPECT_EQ(redactor.apply("held by 0123456789abcdef0123456789abcdef since 2 s"), "held by 01234567... since 2 s");
}

// Found by the fuzzer: the prefix shown for a control byte is '?', and a
// token ending in '?' was completed again by the byte before it; a custom
// token holding '.' re-formed with the "..." after its prefix (review).
TEST(CliRedactor, AReplacementNeverFormsTheTokenAgain) {
  for (const std::string& token : {std::string("\x01?"), std::string("\x01\x01??"), std::string("a\x02?b?"),
                                   std::string("..b"), std::string("ab.ab..")}) {
    Redactor redactor;
    redactor.add_token(token);
    for (const std::string& text : {"\x01" + token, token + token, "\x01\x01" + token + "\x01" + token,
                                    token.substr(0, 1) + token + token.substr(token.size() - 1)}) {
      const std::string out = redactor.apply(text);
      EXPECT_EQ(out.find(token), std::string::npos) << "token left in " << testing::PrintToString(out);
    }
  }
}

TEST(CliRedactor, APasswordIsHiddenWhole) {
  Redactor redactor;
  redactor.add_password("s3cret");
  EXPECT_EQ(redactor.apply("AUTH s3cret failed; s3crets3cret"), "AUTH *** failed; ******");
}

}  // namespace
