// unit/test_resp_writer.cpp — lockon writes RESP commands itself
// (append_resp in src/client/connection.cpp) instead of through hiredis's
// formatter. Every byte it writes must be what hiredis would have written:
// checked here against redisFormatCommandArgv for argument lists whose
// lengths cross every digit boundary, binary and empty arguments, and with
// bytes already in the buffer (pipelined commands are appended).
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "client/connection.hpp"

namespace lockon::detail {
namespace {

std::string hiredis_format(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const auto& arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  char* formatted = nullptr;
  const long long n = redisFormatCommandArgv(&formatted, static_cast<int>(args.size()), argv.data(), lengths.data());
  EXPECT_GT(n, 0);
  std::string out(formatted, static_cast<std::size_t>(n));
  std::free(formatted);
  return out;
}

std::string ours(const std::string& prefix, const std::vector<std::string>& args) {
  std::vector<std::string_view> views(args.begin(), args.end());
  std::string out = prefix;
  append_resp(out, views);
  return out;
}

TEST(RespWriter, MatchesHiredisOnALockCommand) {
  const std::vector<std::string> set{"SET", "bench:lock", "0123456789abcdef0123456789abcdef", "NX", "PX", "30000"};
  EXPECT_EQ(ours("", set), hiredis_format(set));
  EXPECT_EQ(ours("", set), "*6\r\n$3\r\nSET\r\n$10\r\nbench:lock\r\n$32\r\n0123456789abcdef0123456789abcdef\r\n"
                           "$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n");
}

TEST(RespWriter, MatchesHiredisAcrossDigitBoundariesBinaryAndEmptyArguments) {
  std::mt19937 random(20261123);
  const std::vector<std::size_t> sizes{0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 1001, 9999, 10000, 100000};
  for (const std::size_t size : sizes) {
    std::string binary(size, '\0');
    for (auto& byte : binary) byte = static_cast<char>(random() & 0xff);  // \r, \n and NUL included
    const std::vector<std::string> args{"EVALSHA", binary, "", "1", std::string(size, 'x')};
    ASSERT_EQ(ours("", args), hiredis_format(args)) << "argument size " << size;
  }
  // Argument counts across digit boundaries too.
  for (const std::size_t count : {1u, 9u, 10u, 11u, 99u, 100u, 101u}) {
    std::vector<std::string> args;
    for (std::size_t i = 0; i < count; ++i) args.push_back(std::to_string(random()));
    ASSERT_EQ(ours("", args), hiredis_format(args)) << count << " arguments";
  }
}

TEST(RespWriter, AppendsAfterBytesAlreadyInTheBuffer) {
  const std::vector<std::string> first{"SET", "k", "v"};
  const std::vector<std::string> second{"GET", "k"};
  std::string buffer = ours("", first);
  buffer = ours(buffer, second);
  EXPECT_EQ(buffer, hiredis_format(first) + hiredis_format(second));
}

}  // namespace
}  // namespace lockon::detail
