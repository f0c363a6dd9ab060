// integration/test_harness.cpp — the test harness itself, against real
// redis-server processes. Independent of lockon's client layer on purpose.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

/// Gone or a zombie (in a container nobody may reap an orphan).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  return paren == std::string::npos || (paren + 2 < stat.size() && stat[paren + 2] == 'Z');
}

bool refuses_connections(int port) {
  try {
    RawConnection probe("127.0.0.1", port, {.connect_timeout = 500ms, .command_timeout = 500ms});
    return false;
  } catch (const RawIoError&) {
    return true;
  }
}

std::string config_value(const RedisServer& server, const std::string& name) {
  const RawReply reply = server.command({"CONFIG", "GET", name});
  return reply.elements.size() == 2 ? reply.elements[1].str : "<missing: " + reply.to_string() + ">";
}

// ------------------------------------------------------------ servers

TEST(HarnessServer, StartsOnLoopbackWithoutPersistenceAndAnswersPing) {
  const auto started = Clock::now();
  RedisServer server;
  const auto startup = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
  std::cout << "redis-server startup took " << startup.count() << " ms\n";

  EXPECT_TRUE(server.running());
  EXPECT_GT(server.pid(), 0);
  EXPECT_GT(server.port(), 0);
  EXPECT_EQ(server.host(), "127.0.0.1");
  EXPECT_EQ(server.url(), "redis://127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(server.url_without_auth(), server.url());

  RawConnection connection = server.connect();
  EXPECT_TRUE(connection.command({"PING"}).is("PONG"));
  EXPECT_EQ(config_value(server, "bind"), "127.0.0.1");
  EXPECT_EQ(config_value(server, "save"), "");
  EXPECT_EQ(config_value(server, "appendonly"), "no");
  EXPECT_NE(server.log_tail().find("Ready to accept connections"), std::string::npos);
}

TEST(HarnessServer, ServerStartedByAThreadThatEndedKeepsRunning) {
  // PR_SET_PDEATHSIG follows the forking *thread*: this guards the design of
  // forking from the harness's long-lived launcher thread instead.
  std::unique_ptr<RedisServer> server;
  std::string error;
  std::thread([&] {
    try {
      server = std::make_unique<RedisServer>();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }).join();
  ASSERT_TRUE(server) << error;
  std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(server->running());
  EXPECT_TRUE(server->command({"PING"}).is("PONG"));
}

TEST(HarnessServer, KillMakesConnectionsFail) {
  RedisServer server;
  RawConnection connection = server.connect();
  ASSERT_TRUE(connection.command({"SET", "k", "v"}).is("OK"));
  const pid_t pid = server.pid();

  server.kill();

  EXPECT_FALSE(server.running());
  EXPECT_EQ(server.pid(), -1);
  EXPECT_TRUE(process_gone(pid));
  EXPECT_THROW(connection.command({"PING"}), RawIoError);
  EXPECT_THROW(server.connect(), RawIoError);
}

TEST(HarnessServer, RestartAfterKillUsesTheSamePortAndStartsEmpty) {
  RedisServer server;
  const int port = server.port();
  const pid_t first_pid = server.pid();
  ASSERT_TRUE(server.command({"SET", "k", "v"}).is("OK"));

  server.kill();
  server.restart();

  EXPECT_TRUE(server.running());
  EXPECT_EQ(server.port(), port);
  EXPECT_NE(server.pid(), first_pid);
  EXPECT_TRUE(server.command({"PING"}).is("PONG"));
  EXPECT_TRUE(server.command({"GET", "k"}).is_nil());
  EXPECT_EQ(server.command({"DBSIZE"}).integer, 0);
}

/// Listens on 127.0.0.1:port until destroyed, to make a port busy.
class PortSquatter {
 public:
  explicit PortSquatter(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    // The killed server's closed connections sit in TIME_WAIT on this port
    // (it closed first); without SO_REUSEADDR they make bind() fail (seen
    // once under ctest -j2). A second *listener* is still refused, which is
    // what makes the port busy for redis-server (it sets SO_REUSEADDR too).
    const int on = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    bound_ = ::bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 &&
             ::listen(fd_, 1) == 0;
  }
  ~PortSquatter() { ::close(fd_); }
  PortSquatter(const PortSquatter&) = delete;
  PortSquatter& operator=(const PortSquatter&) = delete;
  bool bound() const { return bound_; }

 private:
  int fd_;
  bool bound_ = false;
};

TEST(HarnessServer, RestartWaitsBrieflyForABusyPortThenFailsLoudly) {
  RedisServer server;
  const int port = server.port();
  server.kill();
  {
    auto squatter = std::make_unique<PortSquatter>(port);
    ASSERT_TRUE(squatter->bound());
    std::thread release([&] {
      std::this_thread::sleep_for(300ms);
      squatter.reset();
    });
    EXPECT_NO_THROW(server.restart());  // retried until the port came free
    release.join();
  }
  EXPECT_TRUE(server.command({"PING"}).is("PONG"));

  server.kill();
  const PortSquatter squatter(port);
  ASSERT_TRUE(squatter.bound());
  const auto started = Clock::now();
  try {
    server.restart();
    ADD_FAILURE() << "restart succeeded on a busy port";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("already in use"), std::string::npos) << error.what();
  }
  EXPECT_LT(Clock::now() - started, 5s);
  EXPECT_FALSE(server.running());
}

TEST(HarnessServer, RestartAfterStopAndWhileRunning) {
  RedisServer server;
  const int port = server.port();
  server.stop();
  EXPECT_FALSE(server.running());
  server.restart();
  EXPECT_TRUE(server.command({"PING"}).is("PONG"));

  const pid_t before = server.pid();
  server.restart();  // stops the running process first
  EXPECT_NE(server.pid(), before);
  EXPECT_TRUE(process_gone(before));
  EXPECT_EQ(server.port(), port);
  EXPECT_TRUE(server.command({"PING"}).is("PONG"));
}

TEST(HarnessServer, PausedServerTimesCommandsOutUntilResumed) {
  RedisServer server;
  RawConnection connection = server.connect({.command_timeout = 200ms});
  ASSERT_TRUE(connection.command({"PING"}).is("PONG"));

  server.pause();
  EXPECT_TRUE(server.paused());
  EXPECT_TRUE(server.running());
  const auto sent = Clock::now();
  try {
    connection.command({"PING"});
    ADD_FAILURE() << "a paused server answered PING";
  } catch (const RawIoError& error) {
    EXPECT_TRUE(error.timed_out()) << error.what();
  }
  const auto waited = Clock::now() - sent;
  EXPECT_GE(waited, 150ms);
  EXPECT_LT(waited, 2s);

  server.resume();
  EXPECT_FALSE(server.paused());
  EXPECT_TRUE(server.connect().command({"PING"}).is("PONG"));
}

TEST(HarnessServer, DestructorStopsEvenAPausedServerAndRemovesItsDirectory) {
  pid_t pid = -1;
  std::filesystem::path dir;
  {
    RedisServer server;
    pid = server.pid();
    dir = server.dir();
    ASSERT_TRUE(std::filesystem::exists(dir / "redis.log"));
    server.pause();
  }
  EXPECT_TRUE(process_gone(pid));
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(HarnessServer, RequirepassRejectsUnauthenticatedCommands) {
  RedisServer server({.requirepass = "p@ss word"});
  EXPECT_EQ(server.url(), "redis://:p%40ss%20word@127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(server.url_without_auth(), "redis://127.0.0.1:" + std::to_string(server.port()));

  RawConnection anonymous(server.host(), server.port());
  const RawReply refused = anonymous.command({"PING"});
  EXPECT_TRUE(refused.is_error());
  EXPECT_EQ(refused.str.rfind("NOAUTH", 0), 0u) << refused.to_string();

  EXPECT_TRUE(server.connect().command({"PING"}).is("PONG"));
  EXPECT_THROW(server.connect({.password = "wrong"}), std::runtime_error);
}

TEST(HarnessServer, AclUsersAuthenticateWithTheirRules) {
  RedisServer server({.acl_users = {"alice on >wonderland ~* &* +@all",
                                    "bob on >builder ~bob:* +set +get +acl|whoami"}});

  RawConnection alice = server.connect({.user = "alice", .password = "wonderland"});
  EXPECT_TRUE(alice.command({"ACL", "WHOAMI"}).is("alice"));
  EXPECT_TRUE(alice.command({"SET", "anything", "1"}).is("OK"));

  RawConnection bob = server.connect({.user = "bob", .password = "builder"});
  EXPECT_TRUE(bob.command({"SET", "bob:key", "1"}).is("OK"));
  const RawReply denied = bob.command({"SET", "other", "1"});
  EXPECT_EQ(denied.str.rfind("NOPERM", 0), 0u) << denied.to_string();

  EXPECT_THROW(server.connect({.user = "alice", .password = "wrong"}), std::runtime_error);
  EXPECT_TRUE(server.command({"PING"}).is("PONG"));  // the default user is untouched
}

TEST(HarnessServer, ExtraArgumentsReachTheServer) {
  RedisServer server({.extra_args = {"--maxmemory", "10mb", "--maxmemory-policy", "noeviction"}});
  EXPECT_EQ(config_value(server, "maxmemory"), "10485760");
  EXPECT_EQ(config_value(server, "maxmemory-policy"), "noeviction");
}

TEST(HarnessServer, BadConfigurationFailsLoudlyWithTheServerLog) {
  const auto started = Clock::now();
  try {
    RedisServer server({.extra_args = {"--no-such-directive", "1"}});
    ADD_FAILURE() << "a server with a bad directive started on port " << server.port();
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("failed to start"), std::string::npos) << message;
    EXPECT_NE(message.find("no-such-directive"), std::string::npos) << message;
  }
  EXPECT_LT(Clock::now() - started, 3s);  // no retry loop for a non-port failure
}

TEST(HarnessServer, StartServersGivesDistinctAnsweringServers) {
  const auto servers = start_servers(3);
  ASSERT_EQ(servers.size(), 3u);
  std::set<int> ports;
  std::set<pid_t> pids;
  for (const auto& server : servers) {
    ports.insert(server->port());
    pids.insert(server->pid());
    EXPECT_TRUE(server->command({"PING"}).is("PONG")) << server->port();
  }
  EXPECT_EQ(ports.size(), 3u);
  EXPECT_EQ(pids.size(), 3u);
}

TEST(HarnessServer, ServersDieWithACrashedTestProcess) {
  // Become the orphaned server's new parent so that we can reap it and see
  // how it died (for the duration of this test only).
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  const ProcessResult result = run_process(worker_argv("start_server_and_die"), 20s);
  ASSERT_EQ(result.signal, SIGKILL) << result.describe();

  std::istringstream line(result.out);
  std::string word;
  pid_t pid = -1;
  int port = 0;
  std::string dir;
  line >> word >> pid >> port >> dir;
  ASSERT_EQ(word, "server") << result.describe();
  ASSERT_GT(pid, 0) << result.describe();
  const auto status = wait_for_exit(pid, 2s);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  ASSERT_TRUE(status.has_value()) << "redis-server " << pid << " outlived its crashed parent";
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL) << "status " << *status;
  EXPECT_TRUE(process_gone(pid));
  EXPECT_TRUE(eventually(2s, [&] { return refuses_connections(port); }, 5ms)) << "port " << port;
  if (!dir.empty()) {  // the crashed worker could not clean up after itself
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
}

// ----------------------------------------------------------- processes

TEST(HarnessProcess, RunsAWorkerCommand) {
  const ProcessResult result = run_process(worker_argv("echo", {"hello", "lock", "world"}), 10s);
  EXPECT_TRUE(result.succeeded()) << result.describe();
  EXPECT_EQ(result.out, "hello lock world\n");
  EXPECT_EQ(result.err, "");
}

TEST(HarnessProcess, UnknownWorkerCommandListsTheKnownOnes) {
  const ProcessResult result = run_process(worker_argv("no-such-command"), 10s);
  EXPECT_EQ(result.exit_code, 2) << result.describe();
  EXPECT_NE(result.err.find("unknown command 'no-such-command'"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("echo"), std::string::npos) << result.err;
}

TEST(HarnessProcess, CapturesExitCodeOutputAndEnvironment) {
  const ProcessResult result =
      run_process({"/bin/sh", "-c", "printf '%s' \"$LOCKON_PROBE\"; echo oops >&2; exit 7"}, 10s,
                  {{"LOCKON_PROBE", "probe value"}});
  EXPECT_EQ(result.exit_code, 7) << result.describe();
  EXPECT_EQ(result.signal, 0);
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.out, "probe value");
  EXPECT_EQ(result.err, "oops\n");
}

TEST(HarnessProcess, KillsAProcessThatOutlivesItsTimeout) {
  const ProcessResult result = run_process({"sleep", "30"}, 200ms);
  EXPECT_TRUE(result.timed_out) << result.describe();
  EXPECT_EQ(result.signal, SIGKILL);
  EXPECT_FALSE(result.succeeded());
  EXPECT_GE(result.elapsed, 200ms);
  EXPECT_LT(result.elapsed, 5s);
}

TEST(HarnessProcess, MissingProgramThrows) {
  EXPECT_THROW(run_process({"/nonexistent/lockon-program"}, 1s), std::runtime_error);
  EXPECT_THROW(run_process({"lockon-no-such-program-in-path"}, 1s), std::runtime_error);
}

TEST(HarnessProcess, SpawnedChildCanBeKilledMidRun) {
  Child child = spawn({"/bin/sh", "-c", "echo ready; exec sleep 30"});
  ASSERT_TRUE(child.wait_for_output("ready", 5s)) << child.stderr_text();
  EXPECT_TRUE(child.running());
  EXPECT_FALSE(child.try_wait(50ms).has_value());

  child.kill(SIGKILL);
  const ProcessResult result = child.wait(5s);
  EXPECT_EQ(result.signal, SIGKILL) << result.describe();
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.out, "ready\n");
  EXPECT_FALSE(child.running());
}

TEST(HarnessProcess, ChildrenInheritNoDescriptorsButStdio) {
  RedisServer server;
  RawConnection open_socket = server.connect();  // must not leak into the child
  const ProcessResult result = run_process({"ls", "/proc/self/fd"}, 10s);
  ASSERT_TRUE(result.succeeded()) << result.describe();
  // 0, 1, 2 and the directory ls itself is reading.
  EXPECT_EQ(result.out, "0\n1\n2\n3\n");
}

// ------------------------------------------------------------ fixtures

class HarnessFixture : public RedisTest {};

TEST_F(HarnessFixture, UniqueKeysNameTheTestAndNeverRepeat) {
  const std::string first = key("lock");
  const std::string second = key("lock");
  EXPECT_NE(first, second);
  EXPECT_NE(first.find("HarnessFixture.UniqueKeysNameTheTestAndNeverRepeat"), std::string::npos)
      << first;
  EXPECT_EQ(first.substr(first.size() - 5), ":lock");
}

TEST_F(HarnessFixture, SharedServerAnswersAndFlushes) {
  EXPECT_EQ(&server(), &shared_server());
  const std::string name = key("value");
  ASSERT_TRUE(server().command({"SET", name, "1"}).is("OK"));
  flush();
  EXPECT_EQ(server().command({"DBSIZE"}).integer, 0);
}

TEST_F(HarnessFixture, SetUpRevivesAServerAnEarlierTestKilledOrPaused) {
  server().kill();
  SetUp();
  EXPECT_TRUE(server().command({"PING"}).is("PONG"));
  server().pause();
  SetUp();
  EXPECT_TRUE(server().command({"PING"}).is("PONG"));
}

}  // namespace
}  // namespace lockon::test
