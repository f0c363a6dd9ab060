// integration/test_cli_run.cpp — `lockon run` (issue 7) against real
// redis-server processes: mutual exclusion of concurrent runs (one server and
// Redlock), -n/-w and their exit codes, exit status and signal propagation,
// SIGTERM forwarding, a lost lease, fencing, exec failures, unreachable
// servers. The tool is the binary built from tools/ (LOCKON_CLI).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "lockon/redlock.hpp"
#include "support/cli_support.hpp"
#include "support/fixtures.hpp"
#include "support/held_back.hpp"
#include "support/precondition_rounds.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool key_exists(const RedisServer& server, const std::string& key) {
  return server.command({"EXISTS", key}).integer == 1;
}

// A private directory for scripts, counters and markers, removed afterwards.
class TempDir {
 public:
  TempDir() : path_(make_temp_dir("lockon-cli-test")) {}
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  void write(const std::string& name, const std::string& content, bool executable = false) const {
    std::ofstream(path_ / name, std::ios::binary) << content;
    if (executable) ::chmod(file(name).c_str(), 0755);
  }

 private:
  std::filesystem::path path_;
};

class CliRun : public RedisTest {
 protected:
  static constexpr int kTimedRounds = 16;
  // `lockon args...` run to its end and timed, with how long the machine
  // held it (or the server it asks) back.
  static HeldBackRun timed_lockon(const std::vector<std::string>& args) {
    HeldBackRun run = run_measuring_hold_back(lockon_argv(args), 20s, {server().pid()});
    std::cout << "lockon " << args[3] << ": " << run.timing() << "\n";
    return run;
  }
};

// The racy read-sleep-write increment that only the lock makes correct; the
// log records entering (+) and leaving (-) the critical section.
void write_increment_script(const TempDir& dir) {
  dir.write("increment.sh",
            "#!/bin/sh\n"
            "printf + >> \"$2\"\n"
            "n=$(cat \"$1\")\n"
            "sleep 0.002\n"
            "echo $((n + 1)) > \"$1\"\n"
            "printf - >> \"$2\"\n",
            true);
  dir.write("counter", "0\n");
  dir.write("log", "");
}

// 4 shell loops, each running `lockon run NAME -- increment.sh` 50 times.
void run_four_incrementers(const TempDir& dir, const std::vector<std::string>& url_args, const std::string& name) {
  constexpr int kWorkers = 4;
  constexpr int kRounds = 50;
  std::string lockon_command = "\"$LOCKON\" run";
  for (const auto& arg : url_args) lockon_command += " '" + arg + "'";
  const std::string loop = "i=0; while [ $i -lt " + std::to_string(kRounds) + " ]; do " + lockon_command +
                           " \"$NAME\" -- \"$SCRIPT\" \"$COUNTER\" \"$LOG\" || exit $?; i=$((i + 1)); done";
  const std::map<std::string, std::string> env{{"LOCKON", kLockon},
                                               {"NAME", name},
                                               {"SCRIPT", dir.file("increment.sh")},
                                               {"COUNTER", dir.file("counter")},
                                               {"LOG", dir.file("log")}};
  const auto start = Clock::now();
  std::vector<Child> workers;
  for (int w = 0; w < kWorkers; ++w) workers.push_back(spawn({"/bin/sh", "-c", loop}, env));
  // 200 runs take ~20 s optimized, ~70 s under ASan, and ~100 s under ASan
  // at ctest -j4 on 2 cores (both tests side by side): bounded well above.
  for (auto& worker : workers) {
    const ProcessResult result = worker.wait(240s);
    EXPECT_TRUE(result.succeeded()) << result.describe();
  }
  std::cout << kWorkers * kRounds << " lockon runs (" << url_args.size() / 2 << " server(s)) took " << ms_since(start)
            << " ms\n";

  EXPECT_EQ(read_file(dir.file("counter")), std::to_string(kWorkers * kRounds) + "\n");
  std::string expected_log;
  for (int i = 0; i < kWorkers * kRounds; ++i) expected_log += "+-";
  EXPECT_EQ(read_file(dir.file("log")), expected_log) << "critical sections overlapped";
}

TEST_F(CliRun, ConcurrentRunsIncrementACounterExactly) {
  TempDir dir;
  write_increment_script(dir);
  const std::string name = key("counter-lock");
  run_four_incrementers(dir, {"--url", server().url()}, name);
  EXPECT_FALSE(key_exists(server(), name)) << "the last run left its lock behind";
}

TEST_F(CliRun, ConcurrentRunsIncrementACounterExactlyWithRedlock) {
  const auto nodes = start_servers(3);
  TempDir dir;
  write_increment_script(dir);
  const std::string name = key("counter-redlock");
  std::vector<std::string> url_args;
  for (const auto& node : nodes) url_args.insert(url_args.end(), {"--url", node->url()});
  run_four_incrementers(dir, url_args, name);
  // A Redlock unlock returns once a majority released: a straggler node's
  // request may run after the last run exited, which cannot settle it in
  // the background (seen twice under ASan in CI, a key left on one node 2 s
  // later). What must hold: no majority keeps the key, and a minority's
  // leftover expires with its lease (the CLI's 30 s ttl).
  const auto nodes_holding = [&] {
    return std::count_if(nodes.begin(), nodes.end(), [&](const auto& node) { return key_exists(*node, name); });
  };
  EXPECT_TRUE(eventually(2s, [&] { return nodes_holding() <= 1; }, 5ms)) << "a run left its lock on a majority";
  EXPECT_TRUE(eventually(32s, [&] { return nodes_holding() == 0; }, 5ms)) << "a run left its lock past its lease";
}

// issue 35 §8: -v said "held by another owner" without the holder record
// it could read.
TEST_F(CliRun, VerboseConflictNamesTheHolderFromItsRecord) {
  const std::string name = key("held-named");
  Lock holder(Client(server().url()), name, {.holder_label = "nightly-report"});
  ASSERT_TRUE(holder.try_lock());
  const ProcessResult held = lockon({"run", "-v", "--url", server().url(), "-n", name, "--", "true"});
  EXPECT_EQ(held.exit_code, kConflict) << held.describe();
  EXPECT_NE(held.err.find("held by another owner"), std::string::npos) << held.err;
  EXPECT_NE(held.err.find("pid=" + std::to_string(::getpid())), std::string::npos) << held.err;
  EXPECT_NE(held.err.find("label=nightly-report"), std::string::npos) << held.err;
  holder.unlock();
}

// Timing-bound: lockon's start-up is part of the bounds below (under ASan
// ~0.3 s of a 1 s bound, ~1 s on 2 cores under ctest -j4). A run that
// overran its bound only because the machine held it back (taking out its
// waits for a CPU, it would have been within the bound; held_back.hpp) did
// not establish the precondition: the scenario is set up again with a fresh
// key, holder and directory (in_rounds). A run that overran by itself fails.
TEST_F(CliRun, NonblockOnAHeldLockExitsWithTheConflictCodeAtOnce) {
  in_rounds(kTimedRounds, 150s, [&]() -> std::string {
    TempDir dir;
    const std::string name = key("held");
    Lock holder(Client(server().url()), name);  // the C++ API on the same key
    EXPECT_TRUE(holder.try_lock());
    if (HasFailure()) return {};

    const HeldBackRun held = timed_lockon({"run", "--url", server().url(), "-n", name, "--", "touch", dir.file("ran")});
    EXPECT_EQ(held.result.exit_code, kConflict) << held.result.describe();
    if (held.over_only_by_load(999)) return "-n on a held lock took " + held.timing();
    EXPECT_LT(held.elapsed_ms, 1000) << held.timing();
    EXPECT_EQ(held.result.err, "") << "a conflict is silent without --verbose, like flock(1)";
    EXPECT_FALSE(std::filesystem::exists(dir.file("ran")));

    const HeldBackRun custom =
        timed_lockon({"run", "--url", server().url(), "-n", "-E", "42", name, "--", "touch", dir.file("ran")});
    EXPECT_EQ(custom.result.exit_code, 42) << custom.result.describe();
    if (custom.over_only_by_load(999)) return "-n -E 42 on a held lock took " + custom.timing();
    EXPECT_LT(custom.elapsed_ms, 1000) << custom.timing();
    EXPECT_FALSE(std::filesystem::exists(dir.file("ran")));
    EXPECT_TRUE(holder.owned()) << "lockon must not touch a lock it did not get";

    holder.unlock();
    const ProcessResult free = lockon({"run", "--url", server().url(), "-n", name, "--", "touch", dir.file("ran")});
    EXPECT_EQ(free.exit_code, 0) << free.describe();
    EXPECT_TRUE(std::filesystem::exists(dir.file("ran")));
    return {};
  });
}

TEST_F(CliRun, WaitGivesUpAfterTheGivenDuration) {
  in_rounds(kTimedRounds, 150s, [&]() -> std::string {
    const std::string name = key("held");
    Lock holder(Client(server().url()), name);
    EXPECT_TRUE(holder.try_lock());
    if (HasFailure()) return {};
    const HeldBackRun run = timed_lockon({"run", "--url", server().url(), "-w", "1s", name, "--", "true"});
    EXPECT_EQ(run.result.exit_code, kWaitTimedOut) << run.result.describe();
    EXPECT_GE(run.elapsed_ms, 900);
    if (run.over_only_by_load(2000)) return "-w 1s on a held lock took " + run.timing();
    EXPECT_LE(run.elapsed_ms, 2000) << run.timing();
    EXPECT_TRUE(holder.owned());
    return {};
  });
}

TEST_F(CliRun, WaitAcquiresOnceTheHolderReleases) {
  const std::string name = key("handover");
  Lock holder(Client(server().url()), name);
  ASSERT_TRUE(holder.try_lock());
  Child waiter = spawn_lockon({"run", "--url", server().url(), "-w", "10s", name, "--", "echo", "ran"});
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(waiter.running()) << "it must wait while the lock is held";
  const auto released = Clock::now();
  holder.unlock();
  const ProcessResult result = waiter.wait(10s);
  EXPECT_TRUE(result.succeeded()) << result.describe();
  EXPECT_EQ(result.out, "ran\n");
  EXPECT_LT(ms_since(released), 3000);
  EXPECT_FALSE(key_exists(server(), name));
}

TEST_F(CliRun, PropagatesTheChildsExitStatusAndSignalDeath) {
  const std::string name = key("status");
  const ProcessResult seven = lockon({"run", "--url", server().url(), name, "--", "sh", "-c", "exit 7"});
  EXPECT_EQ(seven.exit_code, 7) << seven.describe();
  EXPECT_FALSE(key_exists(server(), name));

  const ProcessResult killed = lockon({"run", "--url", server().url(), name, "--", "sh", "-c", "kill -9 $$"});
  EXPECT_EQ(killed.exit_code, 128 + SIGKILL) << killed.describe();
  EXPECT_EQ(killed.signal, 0) << "lockon itself exits normally, with 137";
  EXPECT_FALSE(key_exists(server(), name));

  const ProcessResult ok = lockon({"run", "--url", server().url(), name, "--", "sh", "-c", "echo out; echo err >&2"});
  EXPECT_TRUE(ok.succeeded()) << ok.describe();
  EXPECT_EQ(ok.out, "out\n");
  EXPECT_EQ(ok.err, "err\n") << "lockon adds nothing to stderr without --verbose";
}

TEST_F(CliRun, ForwardsSigtermToTheChildAndReleasesAfterwards) {
  TempDir dir;
  const std::string name = key("forward");
  Child run = spawn_lockon({"run", "--url", server().url(), name, "--", "sh", "-c",
                            "trap 'echo term > \"$MARK\"; exit 3' TERM; echo ready; "
                            "i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done"},
                           {{"MARK", dir.file("marker")}});
  ASSERT_TRUE(run.wait_for_output("ready", 10s)) << run.stderr_text();
  EXPECT_TRUE(key_exists(server(), name)) << "held while the command runs";
  run.kill(SIGTERM);
  const ProcessResult result = run.wait(10s);
  EXPECT_EQ(result.exit_code, 3) << "the child's trap decided the status: " << result.describe();
  EXPECT_EQ(read_file(dir.file("marker")), "term\n");
  EXPECT_FALSE(key_exists(server(), name)) << "released once the child was gone";
}

TEST_F(CliRun, SignalWhileWaitingEndsLockonWithoutRunningTheCommand) {
  TempDir dir;
  const std::string name = key("interrupted");
  Lock holder(Client(server().url()), name);
  ASSERT_TRUE(holder.try_lock());
  Child waiter = spawn_lockon({"run", "--url", server().url(), name, "--", "touch", dir.file("ran")});
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(waiter.running());
  const auto signalled = Clock::now();
  waiter.kill(SIGTERM);
  const ProcessResult result = waiter.wait(5s);
  EXPECT_EQ(result.signal, SIGTERM) << result.describe();
  EXPECT_LT(ms_since(signalled), 2000);
  holder.unlock();
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(std::filesystem::exists(dir.file("ran")));
  EXPECT_FALSE(key_exists(server(), name));
}

TEST_F(CliRun, LockDeletedWhileRunningTerminatesTheChild) {
  const std::string name = key("deleted");
  Child run = spawn_lockon({"run", "--url", server().url(), "--ttl", "600ms", name, "--", "sh", "-c",
                            "echo ready; exec sleep 30"});
  ASSERT_TRUE(run.wait_for_output("ready", 10s)) << run.stderr_text();
  ASSERT_EQ(server().command({"DEL", name}).integer, 1);
  const auto deleted = Clock::now();
  const ProcessResult result = run.wait(10s);
  EXPECT_EQ(result.exit_code, kLost) << result.describe();
  EXPECT_LT(ms_since(deleted), 3000) << "the watchdog renews every ttl/3 = 200 ms";
  EXPECT_EQ(line_count(result.err), 1u) << result.err;
  EXPECT_NE(result.err.find("lost lock"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find(server().host()), std::string::npos) << "names the server: " << result.err;
}

TEST_F(CliRun, LostLockKillsAChildThatIgnoresSigterm) {
  const std::string name = key("stubborn");
  Child run = spawn_lockon({"run", "--url", server().url(), "--ttl", "600ms", "--kill-after", "300ms", name, "--",
                            "sh", "-c", "trap '' TERM; echo ready; exec sleep 30"});
  ASSERT_TRUE(run.wait_for_output("ready", 10s)) << run.stderr_text();
  ASSERT_EQ(server().command({"DEL", name}).integer, 1);
  const auto deleted = Clock::now();
  const ProcessResult result = run.wait(10s);
  EXPECT_EQ(result.exit_code, kLost) << result.describe();
  EXPECT_GE(ms_since(deleted), 300) << "SIGKILL only after --kill-after";
  EXPECT_LT(ms_since(deleted), 4000);
}

TEST_F(CliRun, ServerLostWhileRunningTerminatesTheChild) {
  RedisServer own;
  Child run = spawn_lockon({"run", "--url", own.url(), "--ttl", "600ms", key("server-lost"), "--", "sh", "-c",
                            "echo ready; exec sleep 30"});
  ASSERT_TRUE(run.wait_for_output("ready", 10s)) << run.stderr_text();
  own.kill();
  const auto killed = Clock::now();
  const ProcessResult result = run.wait(10s);
  EXPECT_EQ(result.exit_code, kLost) << result.describe();
  EXPECT_LT(ms_since(killed), 4000) << "renewals fail until the 600 ms lease could have lapsed";
  EXPECT_NE(result.err.find("unreachable"), std::string::npos) << result.err;
}

TEST_F(CliRun, CommandInheritsOurDescriptorsButNotLockonsConnections) {
  TempDir dir;
  // fd 3 is open when lockon starts: passed on, as with flock(1). lockon's
  // own Redis socket is not.
  const ProcessResult result = run_process(
      {"/bin/sh", "-c",
       "exec 3> \"$OUT\"; \"$LOCKON\" run --url \"$URL\" \"$NAME\" -- sh -c "
       "'echo via-fd-3 >&3; ls -l /proc/$$/fd | grep -c socket: || true'"},
      20s, {{"OUT", dir.file("fd3")}, {"LOCKON", kLockon}, {"URL", server().url()}, {"NAME", key("fds")}});
  EXPECT_TRUE(result.succeeded()) << result.describe();
  EXPECT_EQ(read_file(dir.file("fd3")), "via-fd-3\n");
  EXPECT_EQ(result.out, "0\n") << "no socket may leak into COMMAND";
}

TEST_F(CliRun, OnLostIgnoreLetsTheChildFinish) {
  const std::string name = key("ignored");
  Child run = spawn_lockon({"run", "--url", server().url(), "--ttl", "600ms", "--on-lost", "ignore", name, "--", "sh",
                            "-c", "echo ready; sleep 1; echo finished"});
  ASSERT_TRUE(run.wait_for_output("ready", 10s)) << run.stderr_text();
  ASSERT_EQ(server().command({"DEL", name}).integer, 1);
  const ProcessResult result = run.wait(10s);
  EXPECT_TRUE(result.succeeded()) << result.describe();
  EXPECT_EQ(result.out, "ready\nfinished\n");
  EXPECT_NE(result.err.find("--on-lost=ignore"), std::string::npos) << "the loss is still reported: " << result.err;
}

// issue 35 §8: after a lost lease -v said "released 'NAME'" although
// nothing of ours was left to release.
TEST_F(CliRun, AfterALostLeaseVerboseDoesNotSayReleased) {
  const std::string name = key("lost-verbose");
  Child run = spawn_lockon({"run", "-v", "--url", server().url(), "--ttl", "600ms", "--on-lost", "ignore", name, "--",
                            "sh", "-c", "echo ready; sleep 1; echo finished"});
  ASSERT_TRUE(run.wait_for_output("ready", 10s)) << run.stderr_text();
  ASSERT_EQ(server().command({"DEL", name}).integer, 1);
  const ProcessResult result = run.wait(10s);
  EXPECT_TRUE(result.succeeded()) << result.describe();
  EXPECT_EQ(result.err.find("released '" + name + "'"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("nothing released"), std::string::npos) << result.err;
}

TEST_F(CliRun, SigkilledLockonLeavesALockThatExpiresAfterItsTtl) {
  const std::string name = key("crashed");
  Child run = spawn_lockon({"run", "--url", server().url(), "--ttl", "1s", name, "--", "sh", "-c",
                            "echo ready $$; exec sleep 5"});
  ASSERT_TRUE(run.wait_for_output("ready", 10s)) << run.stderr_text();
  const std::string out = run.stdout_text();
  const pid_t child = static_cast<pid_t>(std::stol(out.substr(out.find(' ') + 1)));
  run.kill(SIGKILL);
  const ProcessResult result = run.wait(5s);
  EXPECT_EQ(result.signal, SIGKILL);
  const auto killed = Clock::now();
  EXPECT_TRUE(key_exists(server(), name)) << "nobody released it";
  EXPECT_LE(server().command({"PTTL", name}).integer, 1000);
  EXPECT_TRUE(eventually(3s, [&] { return !key_exists(server(), name); }, 5ms)) << "the lock must expire by its TTL";
  EXPECT_LT(ms_since(killed), 1500);
  ::kill(child, SIGKILL);  // the orphaned command (reparented, reaped by init)
}

TEST_F(CliRun, FenceIsExportedToTheChildAndGrows) {
  const std::string name = key("fenced");
  auto fence_of_run = [&] {
    const ProcessResult r =
        lockon({"run", "--url", server().url(), "--fence-env", "FENCE", name, "--", "sh", "-c", "echo \"$FENCE\""});
    EXPECT_TRUE(r.succeeded()) << r.describe();
    return r.out.empty() ? 0ULL : std::stoull(r.out);
  };
  const unsigned long long first = fence_of_run();
  const unsigned long long second = fence_of_run();
  EXPECT_GE(first, 1u);
  EXPECT_GT(second, first);
  // The counter lives in the fence companion key ("{KEY}:fence").
  EXPECT_EQ(server().command({"GET", "{" + name + "}:fence"}).str, std::to_string(second));

  const ProcessResult unfenced =
      lockon({"run", "--url", server().url(), name, "--", "sh", "-c", "echo \"[${FENCE-unset}]\""});
  EXPECT_EQ(unfenced.out, "[unset]\n") << unfenced.describe();
}

TEST_F(CliRun, CommandNotFoundIs127AndNotExecutableIs126) {
  TempDir dir;
  const std::string name = key("exec");
  const ProcessResult missing = lockon({"run", "--url", server().url(), name, "--", "lockon-no-such-command-xyz"});
  EXPECT_EQ(missing.exit_code, 127) << missing.describe();
  EXPECT_EQ(line_count(missing.err), 1u) << missing.err;
  EXPECT_NE(missing.err.find("command not found"), std::string::npos) << missing.err;
  EXPECT_FALSE(key_exists(server(), name)) << "released after the failed start";

  dir.write("not-executable.sh", "#!/bin/sh\necho hi\n", false);
  const ProcessResult denied = lockon({"run", "--url", server().url(), name, "--", dir.file("not-executable.sh")});
  EXPECT_EQ(denied.exit_code, 126) << denied.describe();
  EXPECT_EQ(line_count(denied.err), 1u) << denied.err;
  EXPECT_FALSE(key_exists(server(), name));
}

TEST_F(CliRun, UnreachableServerIsAOneLineErrorWithoutThePassword) {
  const auto start = Clock::now();
  const ProcessResult result =
      lockon({"run", "--url", "redis://:pw-s3cret-xyz@127.0.0.1:1", key("unreachable"), "--", "true"});
  EXPECT_EQ(result.exit_code, kUnavailable) << result.describe();
  EXPECT_LT(ms_since(start), 5000);
  EXPECT_EQ(line_count(result.err), 1u) << result.err;
  EXPECT_NE(result.err.find("127.0.0.1:1"), std::string::npos) << "names the server: " << result.err;
  EXPECT_EQ(result.err.find("pw-s3cret-xyz"), std::string::npos) << result.err;
}

TEST_F(CliRun, BadUrlAndBadDurationAreUsageErrors) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"run", "--url", "http://example.com", "k", "--", "true"},
           {"run", "--url", server().url(), "--ttl", "soon", "k", "--", "true"},
           {"run", "--url", server().url(), "--ttl", "0", "k", "--", "true"},
           {"run", "--url", server().url(), "-n", "-w", "1s", "k", "--", "true"},
           {"run", "--url", server().url(), "--on-lost", "maybe", "k", "--", "true"},
           {"run", "--url", server().url(), "--fence-env", "1BAD", "k", "--", "true"},
           {"run", "--url", server().url(), "k"},
           {"run", "--url", server().url(), "k", "sh", "-c", "true"},
       }) {
    const ProcessResult result = lockon(args);
    EXPECT_EQ(result.exit_code, kUsage) << args[3] << ": " << result.describe();
    EXPECT_EQ(line_count(result.err), 1u) << result.err;
  }
  // Only the lock key "k" and its companions matter (other tests of the
  // suite share this server and leave fence counters behind).
  EXPECT_EQ(server().command({"EXISTS", "k", "{k}:q", "{k}:fence", "{k}:hf"}).integer, 0)
      << "nothing may be locked on a usage error";
}

TEST_F(CliRun, RedlockWithoutAReachableMajorityIsUnavailable) {
  auto nodes = start_servers(3);
  nodes[0]->kill();
  nodes[1]->kill();
  const ProcessResult result = lockon({"run", "--url", nodes[0]->url(), "--url", nodes[1]->url(), "--url",
                                       nodes[2]->url(), key("minority"), "--", "true"});
  EXPECT_EQ(result.exit_code, kUnavailable) << result.describe();
  EXPECT_EQ(line_count(result.err), 1u) << result.err;
  EXPECT_NE(result.err.find("127.0.0.1:" + std::to_string(nodes[0]->port())), std::string::npos) << result.err;
}

TEST_F(CliRun, DefaultsToTheServerInLockonRedisUrl) {
  const std::string name = key("from-env");
  const ProcessResult result =
      lockon({"run", name, "--", "sh", "-c", "echo \"$(redis-cli -p \"$PORT\" exists \"$NAME\")\""}, 20s,
             {{"LOCKON_REDIS_URL", server().url()}, {"PORT", std::to_string(server().port())}, {"NAME", name}});
  EXPECT_TRUE(result.succeeded()) << result.describe();
  EXPECT_EQ(result.out, "1\n") << "the lock was taken on $LOCKON_REDIS_URL's server";
}

}  // namespace
}  // namespace lockon::test
