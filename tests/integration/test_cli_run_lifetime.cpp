// integration/test_cli_run_lifetime.cpp — COMMAND never outlives `lockon
// run`: a SIGKILLed lockon takes its command with it (PR_SET_PDEATHSIG), so
// the next run, which acquires once the TTL ran out, never runs beside it;
// and a lost lease signals the command.
#include <sys/stat.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "support/cli_support.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

/// Gone: no such process, or a zombie waiting to be reaped by its new parent.
bool no_such_process_or_zombie(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

pid_t pid_after(const std::string& out, const std::string& word) {
  const auto at = out.find(word + " ");
  if (at == std::string::npos) return -1;
  return static_cast<pid_t>(std::stol(out.substr(at + word.size() + 1)));
}

class CliRunLifetime : public RedisTest {
 protected:
  std::filesystem::path dir_ = make_temp_dir("lockon-cli-lifetime");
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
};

// Before: the command (sleep 30) survived its SIGKILLed lockon; once the TTL
// ran out a second `lockon run` started its command beside it.
TEST_F(CliRunLifetime, SigkilledLockonTakesItsCommandAlongAndTheNextRunNeverOverlaps) {
  const std::string name = key("orphan");
  Child first = spawn_lockon({"run", "--url", server().url(), "--ttl", "1s", name, "--", "sh", "-c",
                              "echo ready $$; exec sleep 30"});
  ASSERT_TRUE(first.wait_for_output("ready", 10s)) << first.stderr_text();
  const pid_t command = pid_after(first.stdout_text(), "ready");
  ASSERT_GT(command, 0) << first.stdout_text();
  first.kill(SIGKILL);
  EXPECT_EQ(first.wait(5s).signal, SIGKILL);
  const auto killed = Clock::now();
  const bool gone = eventually(1s, [&] { return no_such_process_or_zombie(command); });
  if (!gone) ::kill(command, SIGKILL);  // do not leave it behind for 30 s
  ASSERT_TRUE(gone) << "COMMAND (pid " << command << ") outlived its lockon";
  EXPECT_LT(ms_since(killed), 500);

  // The second run gets the lock once the 1 s lease has run out, and its
  // command checks that the first one is not running beside it (a zombie
  // awaiting its reaper counts as gone: it runs nothing).
  const std::string check = "state=$(cut -d' ' -f3 /proc/" + std::to_string(command) +
                            "/stat 2>/dev/null); if [ -n \"$state\" ] && [ \"$state\" != Z ]; then echo overlap; "
                            "else echo alone; fi";
  Child second = spawn_lockon({"run", "--url", server().url(), "--wait", "5s", name, "--", "sh", "-c", check});
  const ProcessResult result = second.wait(10s);
  EXPECT_TRUE(result.succeeded()) << result.describe();
  EXPECT_EQ(result.out, "alone\n");
}

// The command is bound to lockon even when lockon dies right after starting
// it (the parent is re-checked after the death signal is armed): repeated
// quick kills never leave a command behind.
TEST_F(CliRunLifetime, LockonKilledRightAfterStartingTheCommandLeavesNoCommand) {
  for (int i = 0; i < 5; ++i) {
    const std::string marker = file("started-" + std::to_string(i));
    Child run = spawn_lockon({"run", "--url", server().url(), "--ttl", "1s", key("quick-" + std::to_string(i)), "--",
                              "sh", "-c", "echo $$ > '" + marker + "'; exec sleep 30"});
    ASSERT_TRUE(eventually(10s, [&] { return std::filesystem::exists(marker) && std::filesystem::file_size(marker) > 0; }))
        << run.stderr_text();
    run.kill(SIGKILL);
    run.wait(5s);
    const pid_t command = static_cast<pid_t>(std::stol(read_file(marker)));
    const bool gone = eventually(1s, [&] { return no_such_process_or_zombie(command); });
    if (!gone) ::kill(command, SIGKILL);
    EXPECT_TRUE(gone) << "round " << i << ": COMMAND (pid " << command << ") outlived its lockon";
  }
}

// Documented in docs/cli.md ("A lost lock"): the command gets SIGTERM.
TEST_F(CliRunLifetime, LostLeaseSignalsTheCommandWithSigterm) {
  const std::string name = key("lost");
  const std::string marker = file("term");
  Child run = spawn_lockon({"run", "--url", server().url(), "--ttl", "600ms", name, "--", "sh", "-c",
                            "trap 'echo TERM > \"" + marker + "\"; exit 0' TERM; echo ready; "
                            "i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"});
  ASSERT_TRUE(run.wait_for_output("ready", 10s)) << run.stderr_text();
  ASSERT_EQ(server().command({"DEL", name}).integer, 1);
  const ProcessResult result = run.wait(10s);
  EXPECT_EQ(result.exit_code, kLost) << result.describe();
  EXPECT_EQ(read_file(marker), "TERM\n");
}

}  // namespace
}  // namespace lockon::test
