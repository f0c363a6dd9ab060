// integration/test_client.cpp — lockon::Client against real servers: auth
// (password, ACL user), transports, database selection, error-reply mapping,
// pipelines, the EVALSHA → EVAL fallback, the bounded pool and thread safety,
// option validation. Failure injection (timeouts, refused/killed servers,
// fan-out) is in test_client_failures.cpp.
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/client_impl.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "client/script.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;


/// A field of INFO (e.g. "total_connections_received"), or -1.
long long info_field(RawConnection& raw, const std::string& section, const std::string& field) {
  const RawReply info = raw.command({"INFO", section});
  const std::string needle = field + ":";
  const auto at = info.str.find(needle);
  if (at == std::string::npos) return -1;
  return std::stoll(info.str.substr(at + needle.size()));
}

// ------------------------------------------------------------------- auth

TEST(ClientAuth, RightPasswordWorksAndIsNeverInMessages) {
  RedisServer server({.requirepass = "p@ss:w0rd/x"});
  const Client client(server.url());  // percent-encoded by the harness
  EXPECT_EQ(client.options().password, "p@ss:w0rd/x");
  EXPECT_NO_THROW(client.ping());
  EXPECT_EQ(client.command({"SET", "k", "v"}).as_string(), "OK");
  EXPECT_EQ(client.command({"GET", "k"}).as_string(), "v");
  EXPECT_EQ(client.endpoint(), "127.0.0.1:" + std::to_string(server.port()));
}

TEST(ClientAuth, WrongPasswordIsAuthError) {
  RedisServer server({.requirepass = "right-one"});
  const Client client("redis://:wrong-one@127.0.0.1:" + std::to_string(server.port()));
  try {
    client.ping();
    FAIL() << "PING succeeded with a wrong password";
  } catch (const AuthError& error) {
    const std::string message = error.what();
    EXPECT_EQ(error.code(), "WRONGPASS") << message;
    EXPECT_EQ(message.find("wrong-one"), std::string::npos) << message;
    EXPECT_NE(message.find("127.0.0.1:" + std::to_string(server.port())), std::string::npos) << message;
    EXPECT_NE(message.find("AUTH"), std::string::npos) << message;
  }
  // Still refused on the next use (a fresh handshake each time, no stale state).
  EXPECT_THROW(client.command({"GET", "k"}), AuthError);
}

TEST(ClientAuth, NoPasswordAgainstRequirepassIsAuthErrorOnFirstCommand) {
  RedisServer server({.requirepass = "needed"});
  const Client client(server.url_without_auth());  // constructing does no I/O
  try {
    client.command({"SET", "k", "v"});
    FAIL() << "SET succeeded without AUTH";
  } catch (const AuthError& error) {
    EXPECT_EQ(error.code(), "NOAUTH") << error.what();
    EXPECT_NE(std::string(error.what()).find("SET"), std::string::npos) << error.what();
  }
  EXPECT_TRUE(server.command({"EXISTS", "k"}).integer == 0);
}

TEST(ClientAuth, PasswordAgainstAServerWithoutOneIsAccepted) {
  // The handshake's HELLO 2 AUTH default <password>: a default user with
  // `nopass` accepts any password (a separate AUTH <password> used to be
  // refused with "no password is set").
  RedisServer server;
  const Client client("redis://:unneeded@127.0.0.1:" + std::to_string(server.port()));
  EXPECT_NO_THROW(client.ping());
  EXPECT_EQ(client.command({"ACL", "WHOAMI"}).as_string(), "default");
}

TEST(ClientAuth, AclUserWithRightPasswordWorksWrongPasswordIsAuthError) {
  RedisServer server({.acl_users = {"alice on >s3cret ~* &* +@all"}});
  const std::string at = "@127.0.0.1:" + std::to_string(server.port());

  const Client alice("redis://alice:s3cret" + at);
  EXPECT_EQ(alice.command({"ACL", "WHOAMI"}).as_string(), "alice");
  EXPECT_EQ(alice.command({"SET", "k", "1"}).as_string(), "OK");

  const Client impostor("redis://alice:guess" + at);
  try {
    impostor.ping();
    FAIL() << "alice authenticated with a wrong password";
  } catch (const AuthError& error) {
    EXPECT_EQ(error.code(), "WRONGPASS") << error.what();
    EXPECT_EQ(std::string(error.what()).find("guess"), std::string::npos) << error.what();
  }
  const Client stranger("redis://mallory:s3cret" + at);
  EXPECT_THROW(stranger.ping(), AuthError);
}

// -------------------------------------------------------------- transports

TEST(ClientTransports, UnixSocketIpv6LoopbackAndHostNameReachTheServer) {
  const std::string socket_path =
      (std::filesystem::temp_directory_path() / ("lockon-client-" + std::to_string(::getpid()) + ".sock")).string();
  struct RemoveAtEnd {
    std::string path;
    ~RemoveAtEnd() {
      std::error_code ignored;
      std::filesystem::remove(path, ignored);
    }
  } remove_socket{socket_path};  // declared first: runs after the server is gone
  RedisServer server(
      {.extra_args = {"--bind", "127.0.0.1", "::1", "--unixsocket", socket_path, "--unixsocketperm", "700"}});
  const std::string port = std::to_string(server.port());

  const Client over_unix("unix://" + socket_path + "?db=2&keepalive=true");
  EXPECT_EQ(over_unix.endpoint(), "unix:" + socket_path);
  EXPECT_EQ(over_unix.command({"SET", "where", "unix"}).as_string(), "OK");
  RawConnection raw = server.connect();
  ASSERT_TRUE(raw.command({"SELECT", "2"}).is("OK"));
  EXPECT_TRUE(raw.command({"GET", "where"}).is("unix"));

  const Client over_ipv6("redis://[::1]:" + port + "/2");
  EXPECT_EQ(over_ipv6.endpoint(), "[::1]:" + port);
  EXPECT_EQ(over_ipv6.command({"GET", "where"}).as_string(), "unix");
  const Reply info = over_ipv6.command({"CLIENT", "INFO"});
  EXPECT_NE(info.as_string().find("addr=[::1]:"), std::string::npos) << info.as_string();

  const Client by_name("redis://localhost:" + port);
  EXPECT_NO_THROW(by_name.ping());
}

// --------------------------------------------------------------- database

class ClientCommands : public RedisTest {};

TEST_F(ClientCommands, DatabaseFromTheUrlPathIsSelected) {
  const std::string name = key("in-db-5");
  const Client client(server().url() + "/5");
  EXPECT_EQ(client.options().db, 5);
  EXPECT_EQ(client.command({"SET", name, "five"}).as_string(), "OK");

  RawConnection raw = server().connect();
  EXPECT_TRUE(raw.command({"GET", name}).is_nil()) << "landed in db 0";
  ASSERT_TRUE(raw.command({"SELECT", "5"}).is("OK"));
  EXPECT_TRUE(raw.command({"GET", name}).is("five"));

  const Client by_query(server().url() + "?db=6");
  EXPECT_EQ(by_query.command({"SET", name, "six"}).as_string(), "OK");
  ASSERT_TRUE(raw.command({"SELECT", "6"}).is("OK"));
  EXPECT_TRUE(raw.command({"GET", name}).is("six"));
}

TEST_F(ClientCommands, OutOfRangeDatabaseIsAReplyError) {
  const Client client(server().url() + "/999");
  try {
    client.ping();
    FAIL() << "SELECT 999 succeeded";
  } catch (const ReplyError& error) {
    EXPECT_EQ(error.code(), "ERR") << error.what();
    EXPECT_NE(std::string(error.what()).find("SELECT 999"), std::string::npos) << error.what();
  }
}

// ------------------------------------------------------------ error replies

TEST_F(ClientCommands, GetOnAHashIsWrongTypeError) {
  const std::string name = key("hash");
  ASSERT_TRUE(server().command({"HSET", name, "field", "value"}).integer == 1);
  const Client client(server().url());
  try {
    client.command({"GET", name});
    FAIL() << "GET on a hash succeeded";
  } catch (const WrongTypeError& error) {
    EXPECT_EQ(error.code(), "WRONGTYPE");
    const std::string message = error.what();
    EXPECT_NE(message.find("GET on 127.0.0.1:" + std::to_string(server().port())), std::string::npos) << message;
  }
  // The error reply left the connection in sync: the next reply is ours.
  EXPECT_EQ(client.command({"HGET", name, "field"}).as_string(), "value");
}

TEST_F(ClientCommands, UnknownCommandIsAGenericReplyError) {
  const Client client(server().url());
  try {
    client.command(std::vector<std::string>{"NOSUCHCOMMAND", "x"});
    FAIL() << "an unknown command succeeded";
  } catch (const AuthError& error) {
    FAIL() << "mapped to AuthError: " << error.what();
  } catch (const WrongTypeError& error) {
    FAIL() << "mapped to WrongTypeError: " << error.what();
  } catch (const ReplyError& error) {
    EXPECT_EQ(error.code(), "ERR");
    EXPECT_NE(std::string(error.what()).find("NOSUCHCOMMAND"), std::string::npos) << error.what();
  }
  EXPECT_NO_THROW(client.ping());
  EXPECT_THROW(client.command(std::vector<std::string>{}), ConfigError);
  EXPECT_THROW(client.command(std::initializer_list<std::string_view>{}), ConfigError);
}

TEST_F(ClientCommands, RepliesOfEveryTypeConvert) {
  const std::string list = key("list");
  const Client client(server().url());
  EXPECT_EQ(client.command({"RPUSH", list, "a", "", "c"}).as_integer(), 3);
  const Reply range = client.command({"LRANGE", list, "0", "-1"});
  ASSERT_EQ(range.type(), Reply::Type::array);
  ASSERT_EQ(range.elements().size(), 3u);
  EXPECT_EQ(range.elements()[1].as_string(), "");
  EXPECT_EQ(range.elements()[1].type(), Reply::Type::string);
  EXPECT_TRUE(client.command({"GET", key("missing")}).is_nil());
  const Reply pong = client.command({"PING"});
  EXPECT_EQ(pong.type(), Reply::Type::status);
  EXPECT_THROW(static_cast<void>(pong.as_integer()), ProtocolError);
  const std::string binary("a\0b\r\nc", 6);
  const std::string bin_key = key("binary");
  client.command({"SET", bin_key, binary});
  EXPECT_EQ(client.command({"GET", bin_key}).as_string(), binary);
}

// ---------------------------------------------------------------- pipeline

TEST_F(ClientCommands, PipelineRepliesComeBackInOrder) {
  const std::string counter = key("counter");
  const Client client(server().url());
  std::vector<std::vector<std::string>> commands{{"SET", counter, "10"}, {"INCR", counter}, {"GET", counter},
                                                 {"ECHO", "hello"},      {"PING"},          {"DEL", counter}};
  for (int i = 0; i < 50; ++i) commands.push_back({"ECHO", std::to_string(i)});
  const std::vector<Reply> replies = client.pipeline(commands);
  ASSERT_EQ(replies.size(), commands.size());
  EXPECT_EQ(replies[0].as_string(), "OK");
  EXPECT_EQ(replies[1].as_integer(), 11);
  EXPECT_EQ(replies[2].as_string(), "11");
  EXPECT_EQ(replies[3].as_string(), "hello");
  EXPECT_EQ(replies[4].as_string(), "PONG");
  EXPECT_EQ(replies[5].as_integer(), 1);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(replies[6 + static_cast<std::size_t>(i)].as_string(), std::to_string(i));
  EXPECT_TRUE(client.pipeline({}).empty());
  EXPECT_THROW(client.pipeline({{"PING"}, {}}), ConfigError);
}

TEST_F(ClientCommands, PipelineWithAnErrorReplyThrowsAfterReadingEverything) {
  const std::string hash = key("hash");
  const std::string after = key("after");
  ASSERT_TRUE(server().command({"HSET", hash, "f", "v"}).integer == 1);
  const Client client(server().url(), PoolOptions{.size = 1});
  EXPECT_THROW(client.pipeline({{"PING"}, {"GET", hash}, {"SET", after, "1"}}), WrongTypeError);
  // The command after the error reply still ran...
  EXPECT_TRUE(server().command({"GET", after}).is("1"));
  // ...and the (single) pooled connection is in sync for the next caller.
  EXPECT_EQ(client.command({"ECHO", "next"}).as_string(), "next");
}

// ----------------------------------------------------------------- scripts

bool script_cached(const RedisServer& server, const detail::Script& script) {
  const RawReply reply = server.command({"SCRIPT", "EXISTS", script.sha()});
  return reply.elements.size() == 1 && reply.elements[0].integer == 1;
}

TEST(ClientScripts, EvalshaFallsBackToEvalAfterScriptFlushAndAfterARestart) {
  RedisServer server;
  const Client client(server.url());
  const detail::Script script("return redis.call('INCR', KEYS[1])");
  ASSERT_EQ(script.sha().size(), 40u);
  const std::array<std::string_view, 1> keys{"counter"};
  auto lease = client.impl()->pool().borrow();
  auto run = [&] {
    detail::ReplyPtr reply = detail::eval(*lease, script, keys, {}, "incr script");
    EXPECT_TRUE(reply != nullptr);
    if (!reply) return -1LL;
    EXPECT_EQ(reply->type, REDIS_REPLY_INTEGER) << (reply->str != nullptr ? reply->str : "");
    return reply->integer;
  };

  EXPECT_FALSE(script_cached(server, script));
  EXPECT_EQ(run(), 1);  // NOSCRIPT, then EVAL (which caches it)
  EXPECT_TRUE(script_cached(server, script));
  EXPECT_EQ(commandstats_calls(server, "eval"), 1);
  EXPECT_EQ(run(), 2);  // EVALSHA alone
  EXPECT_EQ(commandstats_calls(server, "eval"), 1);
  EXPECT_EQ(commandstats_calls(server, "evalsha"), 2);

  ASSERT_TRUE(server.command({"SCRIPT", "FLUSH"}).is("OK"));
  EXPECT_FALSE(script_cached(server, script));
  EXPECT_EQ(run(), 3);
  EXPECT_TRUE(script_cached(server, script));

  server.kill();
  server.restart();  // empty: no data, no script cache
  EXPECT_EQ(run(), 1);  // the stale socket is replaced; NOSCRIPT falls back to EVAL again
  EXPECT_TRUE(script_cached(server, script));
}

TEST(ClientScripts, OtherErrorRepliesAreReturnedAndManyArgumentsWork) {
  RedisServer server;
  const Client client(server.url());
  auto lease = client.impl()->pool().borrow();

  const detail::Script failing("return redis.error_reply('MYERR boom')");
  detail::ReplyPtr error = detail::eval(*lease, failing, {}, {}, "failing script");
  ASSERT_TRUE(error != nullptr);
  EXPECT_EQ(error->type, REDIS_REPLY_ERROR);
  EXPECT_EQ(std::string(error->str, error->len), "MYERR boom");

  // More arguments than the inline argv holds.
  const detail::Script count("return #KEYS * 100 + #ARGV");
  const std::vector<std::string> storage{"k1", "k2", "k3"};
  std::vector<std::string_view> keys(storage.begin(), storage.end());
  std::vector<std::string> arg_storage;
  for (int i = 0; i < 20; ++i) arg_storage.push_back("a" + std::to_string(i));
  std::vector<std::string_view> args(arg_storage.begin(), arg_storage.end());
  for (int i = 0; i < 2; ++i) {  // EVAL fallback, then EVALSHA
    detail::ReplyPtr reply = detail::eval(*lease, count, keys, args, "count script");
    ASSERT_TRUE(reply != nullptr);
    EXPECT_EQ(reply->type, REDIS_REPLY_INTEGER);
    EXPECT_EQ(reply->integer, 320);
  }
}

// -------------------------------------------------------------------- pool

class ClientPool : public RedisTest {};

TEST_F(ClientPool, ExhaustedPoolTimesOutAfterItsWaitTimeout) {
  const Client client(server().url(), PoolOptions{.size = 2, .wait_timeout = 100ms});
  auto& pool = client.impl()->pool();
  auto first = pool.borrow();
  auto second = pool.borrow();
  const auto started = Clock::now();
  try {
    auto third = pool.borrow();
    FAIL() << "borrowed a third connection from a pool of 2";
  } catch (const PoolTimeoutError& error) {
    const auto waited = ms_since(started);
    EXPECT_GE(waited, 95) << "gave up early";
    EXPECT_LT(waited, 600) << "waited far beyond wait_timeout";
    EXPECT_NE(std::string(error.what()).find(client.endpoint()), std::string::npos) << error.what();
  }
  // Client::command waits on the same pool.
  EXPECT_THROW(client.command({"PING"}), PoolTimeoutError);
}

TEST_F(ClientPool, ZeroWaitTimeoutFailsAtOnce) {
  const Client client(server().url(), PoolOptions{.size = 1, .wait_timeout = 0ms});
  auto& pool = client.impl()->pool();
  {
    auto only = pool.borrow();
    only->ensure_connected();
    const auto started = Clock::now();
    EXPECT_THROW(pool.borrow(), PoolTimeoutError);
    EXPECT_LT(ms_since(started), 50);
  }
  EXPECT_NO_THROW(client.ping());  // returned: available again
}

TEST_F(ClientPool, WaitingBorrowerGetsALeaseReturnedByAnotherThread) {
  const Client client(server().url(), PoolOptions{.size = 1, .wait_timeout = 3000ms});
  auto& pool = client.impl()->pool();
  std::optional<detail::Pool::Lease> held;
  held.emplace(pool.borrow());
  held.value()->ensure_connected();
  const int fd = held.value()->fd();
  std::thread releaser([&] {
    std::this_thread::sleep_for(100ms);
    held.reset();
  });
  const auto started = Clock::now();
  std::optional<detail::Pool::Lease> got;
  EXPECT_NO_THROW(got.emplace(pool.borrow()));
  const auto waited = ms_since(started);
  releaser.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_GE(waited, 80);
  EXPECT_LT(waited, 2000);
  EXPECT_EQ(got.value()->fd(), fd) << "expected the very connection the other thread returned";
  EXPECT_TRUE(got.value()->connected());
}

TEST_F(ClientPool, EightThreadsShareFourConnectionsAndLoseNoIncrement) {
  const std::string counter = key("counter");
  RawConnection observer = server().connect();
  const long long clients_before = info_field(observer, "clients", "connected_clients");
  const long long opened_before = info_field(observer, "stats", "total_connections_received");
  ASSERT_GT(clients_before, 0);
  ASSERT_GE(opened_before, 0);

  const Client client(server().url(), PoolOptions{.size = 4, .wait_timeout = 5000ms});
  constexpr int kThreads = 8;
  constexpr int kIncrements = 500;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  const auto started = Clock::now();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, copy = client] {  // copies share the pool
      for (int i = 0; i < kIncrements; ++i) {
        try {
          copy.command({"INCR", counter});
        } catch (const Error&) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  std::cout << "8 x 500 INCR through a pool of 4: " << ms_since(started) << " ms\n";

  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(observer.command({"GET", counter}).is(std::to_string(kThreads * kIncrements)));
  const long long clients_after = info_field(observer, "clients", "connected_clients");
  const long long opened_after = info_field(observer, "stats", "total_connections_received");
  EXPECT_GE(clients_after - clients_before, 1);
  EXPECT_LE(clients_after - clients_before, 4);
  EXPECT_LE(opened_after - opened_before, 4) << "the pool opened more connections than its size";
}

// ------------------------------------------------------------- validation

TEST(ClientConfig, InvalidOptionsThrowConfigErrorWithoutIo) {
  // A paused server accepts TCP connections but answers nothing: any I/O
  // would hang for the socket timeout instead of failing at once.
  RedisServer server;
  RawConnection observer = server.connect();
  const long long opened_before = info_field(observer, "stats", "total_connections_received");
  ASSERT_GT(opened_before, 0);
  server.pause();
  ConnectionOptions options;
  options.port = server.port();
  options.socket_timeout = 2000ms;
  options.connect_timeout = 2000ms;

  const auto started = Clock::now();
  ConnectionOptions port_zero = options;
  port_zero.port = 0;
  EXPECT_THROW(Client{port_zero}, ConfigError);
  ConnectionOptions port_high = options;
  port_high.port = 65536;
  EXPECT_THROW(Client{port_high}, ConfigError);
  EXPECT_THROW((Client{options, PoolOptions{.size = 0}}), ConfigError);
  EXPECT_THROW((Client{options, PoolOptions{.size = 1, .wait_timeout = -1ms}}), ConfigError);
  ConnectionOptions no_host = options;
  no_host.host.clear();
  EXPECT_THROW(Client{no_host}, ConfigError);
  ConnectionOptions negative_db = options;
  negative_db.db = -1;
  EXPECT_THROW(Client{negative_db}, ConfigError);
  ConnectionOptions negative_timeout = options;
  negative_timeout.socket_timeout = -5ms;
  EXPECT_THROW(Client{negative_timeout}, ConfigError);
  ConnectionOptions user_only = options;
  user_only.user = "alice";
  EXPECT_THROW(Client{user_only}, ConfigError);
  EXPECT_THROW(Client{"redis://127.0.0.1:0"}, ConfigError);
  EXPECT_THROW(Client{"http://127.0.0.1:6379"}, ConfigError);
  // Valid options do not connect either: construction is free.
  const Client lazy(options);
  EXPECT_EQ(lazy.endpoint(), "127.0.0.1:" + std::to_string(server.port()));
  EXPECT_LT(ms_since(started), 500) << "something waited on the paused server";

  server.resume();
  EXPECT_EQ(info_field(observer, "stats", "total_connections_received"), opened_before)
      << "a client connected while being constructed";
  EXPECT_NO_THROW(lazy.ping());
  EXPECT_EQ(info_field(observer, "stats", "total_connections_received"), opened_before + 1);
}

}  // namespace
}  // namespace lockon::test
