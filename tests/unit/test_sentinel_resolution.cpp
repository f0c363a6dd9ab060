// unit/test_sentinel_resolution.cpp — the Sentinel resolution both fronts
// run (client/sentinel_resolution.hpp), driven here over a scripted port on
// the blocking port's coroutine (InlineTask): the order in which sentinels
// and masters are asked, which answers are refused, and the errors — every
// branch without a server.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "client/sentinel_resolution.hpp"
#include "common/inline_task.hpp"
#include "lockon/errors.hpp"
#include "resp_reply.hpp"

namespace lockon::detail {
namespace {

using test_resp::bulk;
using test_resp::parse;

std::string names(int port) { return "*2\r\n" + bulk("127.0.0.1") + bulk(std::to_string(port)); }

// Sentinels and servers by port: what each answers. Records what was asked.
struct ScriptedPort {
  template <class T>
  using Task = InlineTask<T>;
  using Master = int;  // the master's port

  std::map<int, std::string> sentinel_says;  // RESP; absent: no answer in time
  std::map<int, std::string> role_of;        // "master", "slave"; absent: no answer
  std::map<int, bool> refuses_auth;
  std::vector<std::string> asked;

  Task<ReplyPtr> ask_sentinel(const ConnectionOptions& sentinel, std::chrono::steady_clock::time_point) {
    asked.push_back("sentinel:" + std::to_string(sentinel.port));
    if (refuses_auth[sentinel.port]) throw AuthError("WRONGPASS invalid username-password pair", "WRONGPASS");
    const auto said = sentinel_says.find(sentinel.port);
    co_return said == sentinel_says.end() ? nullptr : parse(said->second);
  }
  Task<std::optional<Master>> master_if_role(const ConnectionOptions& master, std::chrono::steady_clock::time_point) {
    asked.push_back("role:" + std::to_string(master.port));
    if (refuses_auth[master.port]) throw AuthError("WRONGPASS invalid username-password pair", "WRONGPASS");
    const auto role = role_of.find(master.port);
    if (role == role_of.end() || role->second != "master") co_return std::nullopt;
    co_return master.port;
  }
};

ConnectionOptions sentinels(std::vector<int> ports) {
  ConnectionOptions options;
  options.deployment = Deployment::sentinel;
  options.master_name = "mymaster";
  for (const int port : ports) options.seeds.push_back(NodeAddress{"127.0.0.1", port});
  options.host = "127.0.0.1";
  options.port = ports.front();
  return options;
}

TEST(SentinelResolution, AskedFromThePreferredSentinelAndADemotedMasterIsRefused) {
  ScriptedPort port;
  port.sentinel_says = {{26001, names(7001)}, {26002, names(7002)}, {26003, names(7003)}};
  port.role_of = {{7001, "master"}, {7002, "slave"}, {7003, "master"}};
  const auto resolved = resolve_master(port, sentinels({26001, 26002, 26003}), 1, std::nullopt).get();
  EXPECT_EQ(resolved.master, 7003) << "26002 named a replica: refused, the next sentinel asked";
  EXPECT_EQ(resolved.sentinel, std::optional<std::size_t>(2));
  EXPECT_EQ(port.asked, (std::vector<std::string>{"sentinel:26002", "role:7002", "sentinel:26003", "role:7003"}));
}

TEST(SentinelResolution, FailoverNewsIsTriedFirstAndItsFailureDecidesNothing) {
  ScriptedPort port;
  port.sentinel_says = {{26001, names(7001)}};
  port.role_of = {{7001, "master"}, {7009, "master"}};
  const auto by_news = resolve_master(port, sentinels({26001}), 0, NodeAddress{"127.0.0.1", 7009}).get();
  EXPECT_EQ(by_news.master, 7009);
  EXPECT_EQ(by_news.sentinel, std::nullopt) << "no sentinel was asked";

  ScriptedPort stale;
  stale.sentinel_says = {{26001, names(7001)}};
  stale.role_of = {{7001, "master"}};
  stale.refuses_auth[7009] = true;
  const auto asked = resolve_master(stale, sentinels({26001}), 0, NodeAddress{"127.0.0.1", 7009}).get();
  EXPECT_EQ(asked.master, 7001);
  EXPECT_EQ(stale.asked, (std::vector<std::string>{"role:7009", "sentinel:26001", "role:7001"}));
}

TEST(SentinelResolution, ErrorsSayWhatEverySentinelAnswered) {
  ScriptedPort unknown;
  unknown.sentinel_says = {{26001, "$-1\r\n"}, {26002, "$-1\r\n"}};
  try {
    resolve_master(unknown, sentinels({26001, 26002}), 0, std::nullopt).get();
    ADD_FAILURE() << "no sentinel knows the name";
  } catch (const ConnectError& e) {
    EXPECT_NE(std::string(e.what()).find("knows master 'mymaster'"), std::string::npos) << e.what();
  }

  ScriptedPort silent;  // 26001 answers nothing, 26002 names a replica
  silent.sentinel_says = {{26002, names(7002)}};
  silent.role_of = {{7002, "slave"}};
  try {
    resolve_master(silent, sentinels({26001, 26002}), 0, std::nullopt).get();
    ADD_FAILURE() << "no master";
  } catch (const ConnectError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("127.0.0.1:26001: no answer within 2000 ms"), std::string::npos) << text;
    EXPECT_NE(text.find("named 127.0.0.1:7002, which is not a master (ROLE)"), std::string::npos) << text;
  }

  ScriptedPort wrong_password;
  wrong_password.refuses_auth = {{26001, true}, {26002, true}};
  EXPECT_THROW(resolve_master(wrong_password, sentinels({26001, 26002}), 0, std::nullopt).get(), AuthError)
      << "a wrong password everywhere is an AuthError, not a ConnectError";
}

// One rule for both fronts (issue 36, D4): with both timeouts 0 ("no
// bound") the blocking front's budget was 100 ms and the Asio front's 20.1 s.
TEST(SentinelResolution, OneBoundForBothFronts) {
  ConnectionOptions options;
  options.connect_timeout = std::chrono::milliseconds(300);
  options.socket_timeout = std::chrono::milliseconds(700);
  EXPECT_EQ(resolution_bounds(options).step, std::chrono::milliseconds(1000));
  EXPECT_EQ(resolution_bounds(options).budget, std::chrono::milliseconds(2100));
  options.connect_timeout = options.socket_timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(resolution_bounds(options).step, std::chrono::milliseconds(10000)) << "5 s for each unbounded timeout";
  const ConnectionOptions bounded = step_bounded(options);
  EXPECT_EQ(bounded.connect_timeout + bounded.socket_timeout, resolution_bounds(options).step);
}

InlineTask<int> add_one(InlineTask<int> inner) { co_return co_await inner + 1; }
InlineTask<int> fails() {
  throw std::runtime_error("step failed");
  co_return 0;
}
InlineTask<int> value(int v) { co_return v; }

TEST(InlineTask, RunsToItsEndInsideTheCallAndCarriesExceptions) {
  EXPECT_EQ(add_one(add_one(value(40))).get(), 42);
  EXPECT_THROW(add_one(fails()).get(), std::runtime_error);
}

}  // namespace
}  // namespace lockon::detail
