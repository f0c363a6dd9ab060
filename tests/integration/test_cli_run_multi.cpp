// integration/test_cli_run_multi.cpp — `lockon run NAME1 NAME2 ... --
// COMMAND`: all names or none, one fence per name, exit codes as for one
// name, and concurrent runs naming the keys in opposite orders excluding
// each other without deadlock.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/cli_support.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

class CliRunMulti : public RedisTest {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    dir_ = make_temp_dir("lockon-cli-multi");
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  bool exists(const std::string& key) { return server().command({"EXISTS", key}).integer == 1; }

  std::filesystem::path dir_;
};

TEST_F(CliRunMulti, TakesAllNamesOrNone) {
  const std::string a = key("a");
  const std::string b = key("b");
  const Client client(server().url());
  Lock plain(client, b);
  ASSERT_TRUE(plain.try_lock());
  const ProcessResult busy = lockon({"run", "--url", server().url(), "-n", a, b, "--", "touch", file("ran")});
  EXPECT_EQ(busy.exit_code, kConflict) << busy.describe();
  EXPECT_FALSE(std::filesystem::exists(file("ran")));
  EXPECT_FALSE(exists(a)) << "a refused run must not keep the names it took";
  plain.release();

  // Both held while COMMAND runs, released afterwards; COMMAND's status is ours.
  const ProcessResult ran = lockon({"run", "--url", server().url(), "-n", b, a, "--", "sh", "-c",
                                    "redis-cli -p " + std::to_string(server().port()) + " EXISTS " + a + " " + b +
                                        " > " + file("held") + "; exit 3"});
  EXPECT_EQ(ran.exit_code, 3) << ran.describe();
  std::ifstream held(file("held"));
  std::string count;
  held >> count;
  EXPECT_EQ(count, "2") << "both names are held while COMMAND runs";
  EXPECT_FALSE(exists(a));
  EXPECT_FALSE(exists(b));
}

TEST_F(CliRunMulti, OneFenceVariablePerName) {
  const std::string a = key("a");
  const std::string b = key("b");
  const ProcessResult ran = lockon({"run", "--url", server().url(), "--fence-env", "F", a, b, "--", "sh", "-c",
                                    "echo \"$F $F_1 $F_2\" > " + file("fences")});
  ASSERT_TRUE(ran.succeeded()) << ran.describe();
  std::ifstream in(file("fences"));
  unsigned long long f = 0;
  unsigned long long f1 = 0;
  unsigned long long f2 = 0;
  in >> f >> f1 >> f2;
  EXPECT_NE(f1, 0u);
  EXPECT_NE(f2, 0u);
  EXPECT_EQ(f, f1);
}

TEST_F(CliRunMulti, OppositeOrdersExcludeEachOtherWithoutDeadlock) {
  const std::string a = key("a");
  const std::string b = key("b");
  {
    std::ofstream counter(file("counter"));
    counter << "0\n";
  }
  const std::string script = file("increment.sh");
  {
    std::ofstream out(script);
    out << "#!/bin/sh\nn=$(cat \"$1\")\nsleep 0.002\necho $((n + 1)) > \"$1\"\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  constexpr int kRounds = 20;
  std::vector<Child> loops;
  for (int w = 0; w < 4; ++w) {
    const std::string names = w % 2 == 0 ? a + " " + b : b + " " + a;
    const std::string loop = "i=0; while [ $i -lt " + std::to_string(kRounds) + " ]; do \"$LOCKON\" run --url " +
                             server().url() + " -w 20 " + names + " -- \"$SCRIPT\" \"$COUNTER\" || exit $?; " +
                             "i=$((i + 1)); done";
    loops.push_back(spawn({"/bin/sh", "-c", loop},
                          {{"LOCKON", kLockon}, {"SCRIPT", script}, {"COUNTER", file("counter")}}));
  }
  for (auto& loop : loops) {
    const ProcessResult result = loop.wait(100s);
    EXPECT_TRUE(result.succeeded()) << result.describe();
  }
  std::ifstream in(file("counter"));
  int counter = 0;
  in >> counter;
  EXPECT_EQ(counter, 4 * kRounds);
}

}  // namespace
}  // namespace lockon::test
