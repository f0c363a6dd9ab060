// integration/test_cli_inspect.cpp — the `lockon` operator commands (issue
// 7): `key` reproduces the C++ key derivation, `status` and `release --force`
// on locks taken through the C++ API (one server and Redlock), usage errors
// and --help.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/encoding.hpp"
#include "lockon/key.hpp"
#include "lockon/lock.hpp"
#include "lockon/lock_on.hpp"
#include "lockon/locker.hpp"
#include "lockon/redlock.hpp"
#include "support/cli_support.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

// ------------------------------------------------------------------ key

std::string cli_key(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"key"};
  argv.insert(argv.end(), args.begin(), args.end());
  const ProcessResult result = lockon(argv);
  EXPECT_TRUE(result.succeeded()) << result.describe();
  EXPECT_EQ(result.err, "");
  return result.out;
}

std::string api_key(std::string_view function, const std::string& encoded,
                    std::string_view prefix = kDefaultKeyPrefix) {
  return make_lock_key(prefix, function.empty() ? std::string() : function_digest(function), encoded) + "\n";
}

TEST(CliKey, MatchesTheCppKeyDerivation) {
  EXPECT_EQ(cli_key({"billing::charge", "--arg", "int:42", "--arg", "str:EUR"}),
            api_key("billing::charge", encode_args(42, std::string("EUR"))));
  EXPECT_EQ(cli_key({"f"}), api_key("f", encode_args()));
  EXPECT_EQ(cli_key({"f", "--arg", "int:-9223372036854775808", "--arg", "uint:18446744073709551615"}),
            api_key("f", encode_args(std::numeric_limits<std::int64_t>::min(),
                                     std::numeric_limits<std::uint64_t>::max())));
  EXPECT_EQ(cli_key({"f", "--arg", "bool:true", "--arg", "bool:0", "--arg", "float:2.5", "--arg", "float:-0"}),
            api_key("f", encode_args(true, false, 2.5, 0.0)));
  EXPECT_EQ(cli_key({"f", "--arg", "str:a:b", "--arg", "str:", "--arg", "str:with space"}),
            api_key("f", encode_args("a:b", "", "with space")));
  EXPECT_EQ(cli_key({"f", "--arg", "uint:5"}), api_key("f", encode_args(5)))
      << "integers compare by value, as in C++";
  EXPECT_EQ(cli_key({"f", "--arg", "int:+7"}), api_key("f", encode_args(7u)));
  EXPECT_EQ(cli_key({"f", "--arg", "float:1e300"}), api_key("f", encode_args(1e300)));
}

TEST(CliKey, DropsTheFunctionIdentityAndHonoursThePrefix) {
  EXPECT_EQ(cli_key({"--no-function", "--arg", "int:7"}), api_key("", encode_args(7)));
  EXPECT_EQ(cli_key({"--no-function", "--arg", "int:7"}), "lockon:entity:lock|" + md5_hex(encode_args(7)) + "\n");
  EXPECT_EQ(cli_key({"transfer", "--prefix", "myapp", "--arg", "str:x"}),
            api_key("transfer", encode_args("x"), "myapp"));
}

// The key lock_on itself locks: RedisLocker::key_for / entity_key_for select
// arguments by position exactly as lock_on<I...> does.
TEST(CliKey, MatchesTheKeysRedisLockerLocks) {
  const RedisLocker locker("redis://127.0.0.1:6379");  // no I/O
  const std::string card = "card-1";
  EXPECT_EQ(cli_key({"bank::withdraw", "--arg", "str:card-1"}), locker.key_for<0>("bank::withdraw", card, 100) + "\n");
  EXPECT_EQ(cli_key({"bank::withdraw", "--arg", "str:card-1", "--arg", "int:100"}),
            (locker.key_for<0, 1>("bank::withdraw", card, 100) + "\n"));
  EXPECT_EQ(cli_key({"bank::withdraw", "--arg", "int:100", "--arg", "bool:false"}),
            (locker.key_for<1, 2>("bank::withdraw", card, 100, false) + "\n"));
  EXPECT_EQ(cli_key({"--no-function", "--arg", "str:card-1"}), locker.entity_key_for<0>(card, 100) + "\n");
  EXPECT_EQ(cli_key({"bank::withdraw", "--prefix", "bank", "--arg", "float:0.25"}),
            lock_on_key("bank", "bank::withdraw", 0.25) + "\n");
  EXPECT_EQ(cli_key({"--no-function", "--prefix", "bank", "--arg", "uint:3"}), entity_lock_key("bank", 3u) + "\n");

  LockerPolicy policy;
  policy.key_prefix = "myapp";
  const RedisLocker prefixed("redis://127.0.0.1:6379", policy);
  EXPECT_EQ(cli_key({"f", "--prefix", "myapp", "--arg", "int:-1"}), prefixed.key_for<0>("f", -1) + "\n");
}

TEST(CliKey, RejectsBadArgumentsAsUsageErrors) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"key", "f", "--arg", "42"},
           {"key", "f", "--arg", "long:42"},
           {"key", "f", "--arg", "int:abc"},
           {"key", "f", "--arg", "int:9223372036854775808"},
           {"key", "f", "--arg", "uint:-1"},
           {"key", "f", "--arg", "bool:maybe"},
           {"key", "f", "--arg", "float:nan"},
           {"key", "f", "--no-function"},
           {"key", "--arg", "int:1"},
           {"key", "f", "--prefix", ""},
       }) {
    const ProcessResult result = lockon(args);
    EXPECT_EQ(result.exit_code, kUsage) << args.back() << ": " << result.describe();
    EXPECT_EQ(line_count(result.err), 1u) << result.err;
    EXPECT_EQ(result.out, "");
  }
}

// --------------------------------------------------------------- status

class CliStatus : public RedisTest {};

TEST_F(CliStatus, FreeKey) {
  const ProcessResult result = lockon({"status", "--url", server().url(), key("free")});
  EXPECT_TRUE(result.succeeded()) << result.describe();
  EXPECT_TRUE(contains(result.out, "state: free\n")) << result.out;
  EXPECT_TRUE(contains(result.out, "node " + server().host() + ":" + std::to_string(server().port()) + ": free"))
      << result.out;
}

TEST_F(CliStatus, HeldKeyShowsTtlFenceAndOnlyATokenPrefix) {
  const std::string name = key("held");
  const std::string token = "0123456789abcdef0123456789abcdef";
  Lock holder(Client(server().url()), name, {.ttl = 20s, .fencing = true, .token = token});
  ASSERT_TRUE(holder.try_lock());
  const ProcessResult result = lockon({"status", "--url", server().url(), name});
  EXPECT_TRUE(result.succeeded()) << result.describe();
  EXPECT_TRUE(contains(result.out, "key: " + name + "\n")) << result.out;
  EXPECT_TRUE(contains(result.out, "state: held\n")) << result.out;
  EXPECT_TRUE(std::regex_search(result.out, std::regex("held, ttl (1[0-9](\\.[0-9]+)?|20) s,")))
      << "about 20 s left: " << result.out;
  EXPECT_TRUE(contains(result.out, "token 01234567...")) << result.out;
  EXPECT_FALSE(contains(result.out, "012345678")) << "never more than 8 characters of the token: " << result.out;
  EXPECT_TRUE(contains(result.out, "fence " + std::to_string(holder.fence()))) << result.out;
  EXPECT_TRUE(holder.owned()) << "status changes nothing";
}

// Whatever a key holds is printed as text: terminal control bytes in it
// (an escape sequence that rewrites the screen) were written raw (review,
// session 21).
TEST_F(CliStatus, ControlBytesInAKeyAreNotWrittenToTheTerminal) {
  const std::string name = key("escape");
  ASSERT_TRUE(server().command({"SET", name, "\x1b[2J\x1b[31m\x07zzzzzzzzzzzzzzzz", "PX", "20000"}).is("OK"));
  const ProcessResult result = lockon({"status", "--url", server().url(), name});
  EXPECT_TRUE(contains(result.out, "token ")) << result.describe();
  EXPECT_FALSE(contains(result.out, "\x1b")) << result.out;
  EXPECT_FALSE(contains(result.out, "\x07")) << result.out;
}

TEST_F(CliStatus, UnreachableServerIsReported) {
  const ProcessResult result = lockon({"status", "--url", "redis://127.0.0.1:1", key("k")});
  EXPECT_EQ(result.exit_code, 69) << result.describe();
  EXPECT_TRUE(contains(result.err, "127.0.0.1:1")) << result.err;
  EXPECT_EQ(line_count(result.err), 1u) << result.err;
}

TEST_F(CliStatus, KeyHoldingANonStringIsNotALock) {
  const std::string name = key("hash");
  ASSERT_EQ(server().command({"HSET", name, "field", "value"}).integer, 1);
  const ProcessResult status = lockon({"status", "--url", server().url(), name});
  EXPECT_EQ(status.exit_code, kNotALock) << status.describe();
  EXPECT_TRUE(contains(status.out, "not a lock: the key holds a hash, not a string")) << status.out;
  const ProcessResult release = lockon({"release", "--force", "--url", server().url(), name});
  EXPECT_EQ(release.exit_code, kNotALock) << release.describe();
  EXPECT_EQ(server().command({"TYPE", name}).str, "hash") << "never deleted";
}

// A shared lock's sorted set overwritten with a string: the WRONGTYPE came
// from a companion key, and status said the key itself held a non-string.
TEST_F(CliStatus, ACompanionKeyOfAnotherTypeIsNamed) {
  const std::string name = key("shares");
  const std::string shares = lock_companion_key(name, "sh");
  ASSERT_EQ(server().command({"SET", shares, "not a sorted set"}).str, "OK");
  const ProcessResult status = lockon({"status", "--url", server().url(), name});
  EXPECT_EQ(status.exit_code, kNotALock) << status.describe();
  EXPECT_TRUE(contains(status.out, "'" + shares + "' holds a string, where lockon keeps a sorted set")) << status.out;
  EXPECT_FALSE(contains(status.out, "the key holds")) << status.out;
  const ProcessResult json = lockon({"status", "--json", "--url", server().url(), name});
  EXPECT_TRUE(contains(json.out, "\"not_a_lock_reason\":")) << json.out;
  const ProcessResult release = lockon({"release", "--force", "--url", server().url(), name});
  EXPECT_EQ(release.exit_code, kNotALock) << release.describe();
  EXPECT_TRUE(contains(release.err, shares)) << release.err;
  EXPECT_EQ(server().command({"TYPE", shares}).str, "string") << "never deleted";
}

// -------------------------------------------------------------- release

class CliRelease : public RedisTest {};

TEST_F(CliRelease, RequiresForce) {
  const std::string name = key("stuck");
  Lock holder(Client(server().url()), name);
  ASSERT_TRUE(holder.try_lock());
  const ProcessResult result = lockon({"release", "--url", server().url(), name});
  EXPECT_EQ(result.exit_code, kUsage) << result.describe();
  EXPECT_TRUE(contains(result.err, "--force")) << result.err;
  EXPECT_EQ(line_count(result.err), 1u) << result.err;
  EXPECT_TRUE(holder.owned());
}

TEST_F(CliRelease, ForceDeletesAStuckLockAfterPrintingWhatItHeld) {
  const std::string name = key("stuck");
  const std::string token = "feedfacecafebeef0123456789abcdef";
  Lock holder(Client(server().url()), name, {.fencing = true, .token = token});
  ASSERT_TRUE(holder.try_lock());
  const std::uint64_t fence = holder.fence();

  const ProcessResult result = lockon({"release", "--force", "--url", server().url(), name});
  EXPECT_TRUE(result.succeeded()) << result.describe();
  EXPECT_TRUE(contains(result.out, "held")) << result.out;
  EXPECT_TRUE(contains(result.out, "feedface...")) << result.out;
  EXPECT_FALSE(contains(result.out, "feedfacec")) << result.out;
  EXPECT_TRUE(contains(result.out, "released '" + name + "' on 1 of 1 node")) << result.out;
  EXPECT_EQ(server().command({"EXISTS", name}).integer, 0);
  EXPECT_FALSE(holder.owned());
  EXPECT_EQ(server().command({"GET", "{" + name + "}:fence"}).str, std::to_string(fence))
      << "the fence counter is kept";

  Lock next(Client(server().url()), name, {.fencing = true});
  EXPECT_TRUE(next.try_lock());
  EXPECT_GT(next.fence(), fence);

  next.unlock();
  const ProcessResult again = lockon({"release", "--force", "--url", server().url(), name});
  EXPECT_TRUE(again.succeeded()) << again.describe();
  EXPECT_TRUE(contains(again.out, "nothing to release")) << again.out;
}

// issue 35 §1: after `release --force` (or an expiry) the old holder
// record stayed: the next holder's record (SET NX) was not written, its
// renewals kept the stale one alive, and `status` said "holder: unknown"
// while the lock was held.
TEST_F(CliRelease, AHolderRecordNamesTheCurrentHolderOrIsAbsent) {
  const std::string name = key("record");
  const std::string who = lock_companion_key(name, "who");
  Lock first(Client(server().url()), name, {.holder_label = "first"});
  ASSERT_TRUE(first.try_lock());
  ASSERT_FALSE(server().command({"GET", who}).is_nil());
  const ProcessResult forced = lockon({"release", "--force", "--url", server().url(), name});
  EXPECT_TRUE(forced.succeeded()) << forced.describe();
  EXPECT_TRUE(server().command({"GET", who}).is_nil()) << "the forced release takes the holder's record too";

  // A stale record all the same (an older lockon's forced release, an
  // expiry): the next holder's acquisition replaces it.
  server().command({"SET", who, "deadbeef|elsewhere|1|1|stale|1", "PX", "60000"});
  Lock second(Client(server().url()), name, {.holder_label = "second"});
  ASSERT_TRUE(second.try_lock());
  const ProcessResult status = lockon({"status", "--url", server().url(), name});
  EXPECT_TRUE(contains(status.out, "label=second")) << status.out;
  EXPECT_FALSE(contains(status.out, "holder: unknown")) << status.out;

  // A stale record written while it is held: its next renewal (here an
  // extension) drops it rather than keep it alive.
  server().command({"SET", who, "deadbeef|elsewhere|1|1|stale|1", "PX", "60000"});
  second.extend(std::chrono::seconds(1));
  EXPECT_TRUE(server().command({"GET", who}).is_nil()) << server().command({"GET", who}).str;
  second.unlock();
  first.unlock();  // its lease was taken: a no-op that records the failure
}

TEST_F(CliRelease, StatusAndReleaseAcrossRedlockNodes) {
  const auto nodes = start_servers(3);
  std::vector<std::string> urls;
  std::vector<std::string> url_args;
  for (const auto& node : nodes) {
    urls.push_back(node->url());
    url_args.insert(url_args.end(), {"--url", node->url()});
  }
  const std::string name = key("redlock");
  Redlock holder(urls, name, {.ttl = 20s});
  ASSERT_TRUE(holder.try_lock());

  std::vector<std::string> status_args{"status"};
  status_args.insert(status_args.end(), url_args.begin(), url_args.end());
  status_args.push_back(name);
  const ProcessResult status = lockon(status_args);
  EXPECT_TRUE(status.succeeded()) << status.describe();
  EXPECT_TRUE(contains(status.out, "state: held (3 of 3 nodes, quorum 2)")) << status.out;

  std::vector<std::string> release_args{"release", "--force"};
  release_args.insert(release_args.end(), url_args.begin(), url_args.end());
  release_args.push_back(name);
  const ProcessResult release = lockon(release_args);
  EXPECT_TRUE(release.succeeded()) << release.describe();
  EXPECT_TRUE(contains(release.out, "on 3 of 3 nodes")) << release.out;
  for (const auto& node : nodes) EXPECT_EQ(node->command({"EXISTS", name}).integer, 0);

  const ProcessResult after = lockon(status_args);
  EXPECT_TRUE(contains(after.out, "state: free (0 of 3 nodes, quorum 2)")) << after.out;
}

// ---------------------------------------------------------------- usage

TEST(CliUsage, HelpDocumentsTheExitCodes) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"--help"}, {"run", "--help"}}) {
    const ProcessResult result = lockon(args);
    EXPECT_TRUE(result.succeeded()) << result.describe();
    for (const char* code : {"  1 ", "  64 ", "  69 ", "  75 ", "  79 ", "  126 ", "  127 "})
      EXPECT_TRUE(contains(result.out, code)) << code << " missing from:\n" << result.out;
  }
  const ProcessResult key_help = lockon({"key", "--help"});
  EXPECT_TRUE(key_help.succeeded()) << key_help.describe();
  EXPECT_TRUE(contains(key_help.out, std::string(key_layout()))) << key_help.out;
}

TEST(CliUsage, MissingOrUnknownCommandIsAUsageError) {
  for (const auto& args : std::vector<std::vector<std::string>>{{}, {"frobnicate"}, {"status"}, {"run", "--bogus"}}) {
    const ProcessResult result = lockon(args);
    EXPECT_EQ(result.exit_code, kUsage) << result.describe();
    EXPECT_EQ(line_count(result.err), 1u) << result.err;
  }
  const ProcessResult version = lockon({"--version"});
  EXPECT_TRUE(version.succeeded()) << version.describe();
  EXPECT_TRUE(contains(version.out, "lockon ")) << version.out;
}

// A URL in the wrong place: CLI11 echoed it whole ("The following arguments
// were not expected: redis://:S3cr3tPW@..."), and a URL given as NAME was
// echoed in the command's error (and `run` would have created a key named
// after it). Found by review, session 21; every case printed the password.
TEST(CliUsage, AUrlInTheWrongPlaceIsNeverEchoedWithItsPassword) {
  const std::string secret = "S3cr3tPW";
  const std::string url = "redis://:" + secret + "@127.0.0.1:1";
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--url", url, "status", "k"},
           {"status", url},
           {"release", url, "--force"},
           {"run", url, "--", "true"},
           {"run", "--nonblock", "k", url, "--", "true"},
       }) {
    const ProcessResult result = lockon(args, 20s, {{"LOCKON_REDIS_URL", "redis://127.0.0.1:1"}});
    EXPECT_EQ(result.exit_code, kUsage) << args[1] << ": " << result.describe();
    EXPECT_FALSE(contains(result.err, secret)) << result.err;
    EXPECT_FALSE(contains(result.out, secret)) << result.out;
  }
  // A sentinel password in the query (review round 2: only userinfo was hidden).
  const std::string sentinel_url = "redis-sentinel://127.0.0.1:1?sentinel_user=u&sentinel_password=" + secret + "#m";
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"status", sentinel_url}, {"run", sentinel_url, "--", "true"}, {"status", "k", sentinel_url}}) {
    const ProcessResult result = lockon(args, 20s, {{"LOCKON_REDIS_URL", "redis://127.0.0.1:1"}});
    EXPECT_NE(result.exit_code, 0) << result.describe();
    EXPECT_FALSE(contains(result.err, secret)) << result.err;
  }
  // Text that merely looks like a URL in the child's arguments is not
  // "redacted" out of ordinary words (review round 2: 'http://o@x' blanked
  // every "o").
  const ProcessResult child_url = lockon({"run", "-v", "--url", "redis://127.0.0.1:1", "lk", "--", "true", "http://o@x"});
  EXPECT_FALSE(contains(child_url.err, "***")) << child_url.err;
  // The same password in $LOCKON_REDIS_URL, with a space the URL parser splits at.
  const ProcessResult spaced =
      lockon({"status", "k"}, 20s, {{"LOCKON_REDIS_URL", "redis://default:S3cr3t PW@127.0.0.1:1"}});
  EXPECT_NE(spaced.exit_code, 0) << spaced.describe();
  EXPECT_FALSE(contains(spaced.err, "S3cr3t")) << spaced.err;
}

}  // namespace
}  // namespace lockon::test
