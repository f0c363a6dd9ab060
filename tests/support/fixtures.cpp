// support/fixtures.cpp — see fixtures.hpp.
#include "support/fixtures.hpp"

#include <atomic>
#include <exception>

namespace lockon::test {

RedisServer& shared_server() {
  // Thread-safe lazy start; if it throws, the next call tries again. Stopped
  // by its destructor at exit (and killed with the process on a crash).
  static RedisServer server;
  return server;
}

std::string unique_key(std::string_view tag) {
  static std::atomic<unsigned long> counter{0};
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string test_name =
      test != nullptr ? std::string(test->test_suite_name()) + "." + test->name() : "no-test";
  return "lockon-test:" + test_name + ":" + std::to_string(++counter) + ":" + std::string(tag);
}

void RedisTest::SetUp() {
  try {
    RedisServer& redis = shared_server();
    if (redis.paused()) redis.resume();
    if (!redis.running()) redis.restart();
  } catch (const std::exception& error) {
    FAIL() << "the test redis-server is unavailable: " << error.what();
  }
}

void RedisTest::flush() {
  const RawReply reply = shared_server().command({"FLUSHALL"});
  ASSERT_TRUE(reply.is("OK")) << "FLUSHALL: " << reply.to_string();
}

void ClientTest::SetUp() {
  RedisTest::SetUp();
  if (HasFatalFailure()) return;
  client_ = std::make_unique<Client>(server().url());
  raw_ = std::make_unique<RawConnection>(server().connect());
}

}  // namespace lockon::test
