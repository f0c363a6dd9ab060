// support/fixtures.hpp — GoogleTest glue for tests that need a real server.
//
//   #include "support/fixtures.hpp"
//
//   class LockTest : public lockon::test::RedisTest {};
//   TEST_F(LockTest, Something) {
//     lockon::Client client(server().url());
//     const std::string name = key("lock");  // unique to this test
//     ...
//     EXPECT_TRUE(server().command({"EXISTS", name}).integer == 0);
//   }
//
// Under ctest every test runs in its own process, so shared_server() starts
// one server per test (~10-30 ms); run directly, the whole binary shares one.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "lockon/client.hpp"

#include "support/process.hpp"
#include "support/redis_server.hpp"
#include "support/steady_time.hpp"

namespace lockon::test {

/// The process's shared server, started on first use. Throws (so the calling
/// test fails) if it cannot be started. Call from any thread.
RedisServer& shared_server();

/// A key no other test (and no other call) uses:
/// "lockon-test:<Suite>.<Test>:<n>:<tag>".
std::string unique_key(std::string_view tag);

/// Base fixture for tests against shared_server(). A derived SetUp() must call
/// RedisTest::SetUp() first.
class RedisTest : public ::testing::Test {
 protected:
  /// Makes sure the shared server runs and is not paused (a previous test in
  /// the same process may have killed or paused it).
  void SetUp() override;

  static RedisServer& server() { return shared_server(); }
  /// FLUSHALL on the shared server.
  static void flush();
  static std::string key(std::string_view tag) { return unique_key(tag); }
};

#ifdef LOCKON_TEST_WORKER
/// argv to run a registered worker command: {LOCKON_TEST_WORKER, command, args...}.
inline std::vector<std::string> worker_argv(const std::string& command,
                                            const std::vector<std::string>& args = {}) {
  std::vector<std::string> argv{LOCKON_TEST_WORKER, command};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}
#endif

/// A lockon Client and a raw connection (bypassing lockon, to inspect or
/// poke state) to shared_server().
class ClientTest : public RedisTest {
 protected:
  void SetUp() override;
  Client& client() { return *client_; }
  RawReply raw(const std::vector<std::string>& args) { return raw_->command(args); }
  long long pttl(const std::string& name) { return raw({"PTTL", name}).integer; }
  std::string value(const std::string& name) { return raw({"GET", name}).str; }
  bool exists(const std::string& name) { return raw({"EXISTS", name}).integer == 1; }

  std::unique_ptr<Client> client_;
  std::unique_ptr<RawConnection> raw_;
};

/// A lock's random token (common/token.hpp): 128 random bits in lowercase
/// hex, '.', then its process's 48-bit nonce in hex.
inline bool is_lock_token(std::string_view s) {
  const auto hex = [](std::string_view part) {
    for (const char c : part)
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
  };
  return s.size() == 45 && s[32] == '.' && hex(s.substr(0, 32)) && hex(s.substr(33));
}

/// A token as redis-py's Lock makes them (uuid4().hex): a lock another
/// client library holds.
inline constexpr const char* kForeignToken = "6f1c2a4e9b7d4c1f8e2a3b5c7d9e0f12";

/// The process nonce a lock token ends with.
inline std::string_view token_nonce(std::string_view token) { return token.substr(token.size() - 12); }

/// True if `text` contains `part`.
inline bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

/// Polls `condition` every `interval` until it holds (true) or `timeout`
/// passes (false): a bounded wait instead of a sleep-as-synchronisation. A
/// condition that opens a connection or asks several servers wants a longer
/// interval than the 2 ms default.
template <class F>
bool eventually(std::chrono::milliseconds timeout, F condition,
                std::chrono::milliseconds interval = std::chrono::milliseconds(2)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(interval);
  }
  return true;
}

}  // namespace lockon::test
