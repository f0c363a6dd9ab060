// integration/test_cli_shared.cpp — `lockon run --shared NAME`, `lockon run
// --exclusive NAME` and `lockon run --permits N NAME`: at most N permit runs
// at once, shared runs overlap but exclude a writer (an --exclusive run or
// C++ code), and the option checks.
#include <chrono>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "lockon/read_write_lock.hpp"
#include "lockon/semaphore.hpp"
#include "support/cli_support.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class CliShared : public RedisTest {};

// COMMAND for the permit runs: counts itself in, records the peak of
// concurrent runs, holds 300 ms, counts itself out.
const char* kCountInside =
    "n=$(redis-cli -u \"$URL\" INCR \"$INSIDE\") && "
    "redis-cli -u \"$URL\" EVAL \"if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then "
    "redis.call('SET', KEYS[1], ARGV[1]) end return 0\" 1 \"$PEAK\" \"$n\" >/dev/null && "
    "sleep 0.3 && redis-cli -u \"$URL\" DECR \"$INSIDE\" >/dev/null";

TEST_F(CliShared, PermitsLetAtMostNRunsAtOnce) {
  const std::string name = key("sem");
  const std::string inside = key("inside");  // key() is unique per call
  const std::string peak = key("peak");
  const std::map<std::string, std::string> env{{"URL", server().url()}, {"INSIDE", inside}, {"PEAK", peak}};
  const auto start = Clock::now();
  std::vector<Child> runs;
  for (int i = 0; i < 6; ++i)
    runs.push_back(spawn(lockon_argv({"run", "--url", server().url(), "--permits", "2", name, "--", "/bin/sh", "-c",
                                      kCountInside}),
                         env));
  for (auto& run : runs) {
    const ProcessResult result = run.wait(30s);
    EXPECT_TRUE(result.succeeded()) << result.describe();
  }
  const long long took = ms_since(start);
  std::cout << "6 runs with --permits 2 (300 ms each): " << took << " ms\n";
  EXPECT_EQ(server().command({"GET", peak}).str, "2");
  EXPECT_EQ(server().command({"GET", inside}).str, "0");
  EXPECT_GE(took, 900) << "three rounds of two";
}

// COMMAND for the shared runs: as kCountInside, holding 1.5 s, so that runs
// whose start a loaded machine (or ASan) spreads out still overlap.
const char* kCountInsideLong =
    "n=$(redis-cli -u \"$URL\" INCR \"$INSIDE\") && "
    "redis-cli -u \"$URL\" EVAL \"if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then "
    "redis.call('SET', KEYS[1], ARGV[1]) end return 0\" 1 \"$PEAK\" \"$n\" >/dev/null && "
    "sleep 1.5 && redis-cli -u \"$URL\" DECR \"$INSIDE\" >/dev/null";

TEST_F(CliShared, SharedRunsOverlapButExcludeAWriter) {
  const std::string name = key("rw");
  const std::string inside = key("inside");
  const std::string peak = key("peak");
  const std::map<std::string, std::string> env{{"URL", server().url()}, {"INSIDE", inside}, {"PEAK", peak}};
  const auto start = Clock::now();
  std::vector<Child> runs;
  for (int i = 0; i < 3; ++i)
    runs.push_back(spawn(lockon_argv({"run", "--url", server().url(), "--shared", name, "--", "/bin/sh", "-c",
                                      kCountInsideLong}),
                         env));
  for (auto& run : runs) {
    const ProcessResult result = run.wait(30s);
    EXPECT_TRUE(result.succeeded()) << result.describe();
  }
  // Overlap is measured, not inferred from the total time (2.4 s instead of
  // < 1.5 s under ASan on a loaded machine, with the runs overlapping).
  const long long took = ms_since(start);
  const std::string most = server().command({"GET", peak}).str;
  std::cout << "3 --shared runs of 1.5 s: " << took << " ms, at most " << most << " at once\n";
  EXPECT_GE(std::stoi(most.empty() ? "0" : most), 2) << "shared runs did not overlap";
  EXPECT_EQ(server().command({"GET", inside}).str, "0");

  const Client client(server().url());
  ReadWriteLock writer(client, name);
  ASSERT_TRUE(writer.try_lock());
  const ProcessResult blocked =
      run_process(lockon_argv({"run", "--url", server().url(), "--shared", "-n", name, "--", "true"}), 20s);
  EXPECT_EQ(blocked.exit_code, kConflict) << blocked.describe();
  writer.unlock();
  const ProcessResult free =
      run_process(lockon_argv({"run", "--url", server().url(), "--shared", "-n", name, "--", "true"}), 20s);
  EXPECT_TRUE(free.succeeded()) << free.describe();
}

// As flock -s and -x on one file: a --shared run and an --exclusive run of
// one NAME exclude each other, both ways, and a C++ ReadWriteLock too.
// Each holder run marks a key once it holds NAME (COMMAND runs only then)
// and keeps NAME until the test ends it.
TEST_F(CliShared, SharedAndExclusiveRunsExcludeEachOther) {
  const std::string name = key("rwx");
  const Client client(server().url());
  for (const std::string holder_mode : {"--shared", "--exclusive"}) {
    const std::string other_mode = holder_mode == "--shared" ? "--exclusive" : "--shared";
    const std::string holding = key("holding");
    Child holder = spawn(lockon_argv({"run", "--url", server().url(), holder_mode, name, "--", "/bin/sh", "-c",
                                      "redis-cli -u \"$URL\" SET \"$HOLDING\" 1 >/dev/null && exec sleep 30"}),
                         {{"URL", server().url()}, {"HOLDING", holding}});
    ASSERT_TRUE(eventually(20s, [&] { return server().command({"EXISTS", holding}).integer == 1; }, 20ms))
        << holder_mode << " run never held " << name;
    const ProcessResult refused =
        run_process(lockon_argv({"run", "--url", server().url(), other_mode, "-n", name, "--", "true"}), 20s);
    EXPECT_EQ(refused.exit_code, kConflict) << other_mode << " ran beside " << holder_mode << ": " << refused.describe();
    ReadWriteLock cxx(client, name);
    if (holder_mode == "--shared") {
      EXPECT_FALSE(cxx.try_lock()) << "a C++ writer beside a --shared run";
    } else {
      EXPECT_FALSE(cxx.try_lock_shared()) << "a C++ reader beside an --exclusive run";
      const ProcessResult second =
          run_process(lockon_argv({"run", "--url", server().url(), "-x", "-n", name, "--", "true"}), 20s);
      EXPECT_EQ(second.exit_code, kConflict) << "two --exclusive runs: " << second.describe();
    }
    holder.kill(SIGTERM);  // forwarded to COMMAND; lockon releases once it is gone
    const ProcessResult ended = holder.wait(20s);
    EXPECT_FALSE(ended.timed_out) << ended.describe();
    const ProcessResult after =
        run_process(lockon_argv({"run", "--url", server().url(), other_mode, "-n", name, "--", "true"}), 20s);
    EXPECT_TRUE(after.succeeded()) << other_mode << " after the " << holder_mode << " run ended: " << after.describe();
  }
}

// Issue 35 §3: `lockon status NAME` said "free" while shared holders ran.
// It shows the shares of NAME's read-write lock or semaphore (how many of
// each kind, how long the last lease lasts, who waits), in text and JSON.
TEST_F(CliShared, StatusShowsSharedHoldersAndTheirWaiters) {
  const std::string name = key("status-rw");
  const Client client(server().url());
  ReadWriteLock first(client, name), second(client, name);
  first.lock_shared();
  second.lock_shared();
  ProcessResult status = lockon({"status", "--url", server().url(), name});
  EXPECT_EQ(status.exit_code, 0) << status.describe();
  EXPECT_NE(status.out.find("state: held shared (2 readers)"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("shared holders: 2 readers; shared waiters: 0"), std::string::npos) << status.out;
  EXPECT_EQ(status.out.find("free"), std::string::npos) << status.out;

  // A writer queues behind the readers: the queue shows it.
  Child writer = spawn_lockon({"run", "--url", server().url(), "-x", "-w", "30s", name, "--", "true"});
  const bool queued = eventually(20s, [&] {
    return server().command({"LLEN", lock_companion_key(name, "sq")}).integer == 1;
  });
  ASSERT_TRUE(queued) << "the --exclusive run never queued";
  status = lockon({"status", "--url", server().url(), name});
  EXPECT_NE(status.out.find("shared waiters: 1"), std::string::npos) << status.out;
  const ProcessResult json = lockon({"status", "--json", "--url", server().url(), name});
  EXPECT_NE(json.out.find("\"shared\":{\"readers\":2,\"writers\":0,\"permits\":0,\"more\":false,\"longest_lease_left_ms\":"),
            std::string::npos)
      << json.out;
  EXPECT_NE(json.out.find("\"waiters\":1}"), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"held\":false"), std::string::npos) << "held: the lock NAME itself" << json.out;
  const auto members = server().command({"ZRANGE", lock_companion_key(name, "sh"), "0", "-1"}).elements;
  EXPECT_EQ(members.size(), 2u);
  for (const auto& member : members) {  // "s:<token>"
    const std::string token_start = member.str.substr(2, 8);
    EXPECT_EQ(status.out.find(token_start), std::string::npos) << "a reader's token in the output";
    EXPECT_EQ(json.out.find(token_start), std::string::npos) << "a reader's token in the JSON";
  }
  const ProcessResult release = lockon({"release", "--force", "--url", server().url(), name});
  EXPECT_NE(release.out.find("shared holders (2 readers) are not released"), std::string::npos) << release.out;

  first.unlock_shared();
  second.unlock_shared();  // hands over to the writer, which runs `true` and releases
  EXPECT_TRUE(writer.wait(20s).succeeded());
  status = lockon({"status", "--url", server().url(), name});
  EXPECT_NE(status.out.find("state: free"), std::string::npos) << status.out;

  // A writer and a semaphore's permits, in the same words.
  ReadWriteLock exclusive(client, name);
  exclusive.lock();
  status = lockon({"status", "--url", server().url(), name});
  EXPECT_NE(status.out.find("state: held shared (1 writer)"), std::string::npos) << status.out;
  exclusive.unlock();
  const std::string sem_name = key("status-sem");
  Semaphore permits(client, sem_name, 3);
  permits.acquire();
  status = lockon({"status", "--url", server().url(), sem_name});
  EXPECT_NE(status.out.find("state: held shared (1 permit)"), std::string::npos) << status.out;
  permits.release();

  // A share whose lease has passed (its holder died; no script pruned it yet) is no holder.
  const std::string stale = key("status-stale");
  server().command({"ZADD", lock_companion_key(stale, "sh"), "1000", "s:0123456789abcdef"});
  status = lockon({"status", "--url", server().url(), stale});
  EXPECT_NE(status.out.find("state: free"), std::string::npos) << status.out;
}

TEST_F(CliShared, ConflictingOptionsAreUsageErrors) {
  const std::string name = key("x");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--shared", "--permits", "2"},
           {"--shared", "--exclusive"},
           {"--exclusive", "--permits", "2"},
           {"--exclusive", "--fence-env", "FENCE"},
           {"--exclusive", key("second-name")},
           {"--permits", "0"},
           {"--shared", "--fence-env", "FENCE"},
           {"--permits", "3", "--replicas", "1"},
           {"--shared", key("second-name")},           // several names are exclusive only
           {"--permits", "2", key("second-name")}}) {
    std::vector<std::string> argv{"run", "--url", server().url()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {name, "--", "true"});
    const ProcessResult result = run_process(lockon_argv(argv), 20s);
    EXPECT_EQ(result.exit_code, kUsage) << args.front() << " " << args.back() << ": " << result.describe();
  }
}

}  // namespace
}  // namespace lockon::test
