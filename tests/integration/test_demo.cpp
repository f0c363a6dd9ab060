// The main job: the withdraw demo, run as a user runs it.
#include <string>

#include "support/fixtures.hpp"

#ifndef LOCKON_DEMO
#error "LOCKON_DEMO (path of the withdraw example) must be defined: build with LOCKON_BUILD_EXAMPLES=ON"
#endif

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

class DemoTest : public RedisTest {};

TEST_F(DemoTest, LockedRunKeepsEveryBalanceExact) {
  const ProcessResult result =
      run_process({LOCKON_DEMO, "--url", server().url(), "--workers", "4", "--ops", "200"}, 60s);
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  EXPECT_NE(result.out.find("lost updates (double spends): 0, overdrawn accounts: 0, failed workers: 0"),
            std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("OK: every balance equals"), std::string::npos) << result.out;
}

TEST_F(DemoTest, StartsItsOwnServerWhenNoUrlIsGiven) {
  const ProcessResult result =
      run_process({LOCKON_DEMO, "--workers", "2", "--ops", "50"}, 60s, {{"LOCKON_REDIS_URL", ""}});
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  EXPECT_NE(result.out.find("Started a throwaway redis-server on 127.0.0.1:"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("OK: every balance equals"), std::string::npos) << result.out;
}

TEST_F(DemoTest, UnlockedRunTellsWhatTheLockPrevents) {
  const ProcessResult result =
      run_process({LOCKON_DEMO, "--url", server().url(), "--no-lock", "--workers", "4", "--ops", "200"}, 60s);
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  EXPECT_NE(result.out.find("WITHOUT a lock"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("withdrawals/s"), std::string::npos) << result.out;
}

TEST_F(DemoTest, BadArgumentsFailClearly) {
  const ProcessResult result = run_process({LOCKON_DEMO, "--workers", "0"}, 10s);
  EXPECT_EQ(result.exit_code, 2) << result.describe();
  EXPECT_NE(result.err.find("withdraw: workers 1..64"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace lockon::test
