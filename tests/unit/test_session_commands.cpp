// unit/test_session_commands.cpp — which commands Client::command/pipeline
// and AsyncClient::async_command refuse: those that would change the session
// of a connection lockon shares (client/session_commands.hpp).
#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "client/session_commands.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

void check(std::initializer_list<std::string_view> args) {
  const std::vector<std::string_view> views(args);
  check_shareable_command(views, "test");
}

void check_pipeline(std::initializer_list<std::initializer_list<std::string_view>> commands) {
  std::vector<std::vector<std::string_view>> owned;
  for (const auto& command : commands) owned.emplace_back(command);
  const std::vector<std::span<const std::string_view>> spans(owned.begin(), owned.end());
  check_shareable_pipeline(spans, "test");
}

TEST(SessionCommands, SessionChangingCommandsAreRefusedInAnyCase) {
  for (const auto name : {"SELECT", "select", "Subscribe", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "MONITOR",
                          "HELLO", "AUTH", "RESET", "QUIT", "READONLY", "READWRITE"})
    EXPECT_THROW(check({name, "1"}), ConfigError) << name;
  EXPECT_THROW(check({"CLIENT", "REPLY", "OFF"}), ConfigError);
  EXPECT_THROW(check({"client", "tracking", "on"}), ConfigError);
  EXPECT_THROW(check_pipeline({{"SET", "a", "1"}, {"SELECT", "2"}}), ConfigError);
}

TEST(SessionCommands, OrdinaryCommandsPass) {
  EXPECT_NO_THROW(check({"SET", "k", "v"}));
  EXPECT_NO_THROW(check({"CLIENT", "INFO"}));
  EXPECT_NO_THROW(check({"CLIENT", "KILL", "TYPE", "pubsub"}));
  EXPECT_NO_THROW(check({"SELECTED"}));  // not a prefix match
  EXPECT_NO_THROW(check({"PUBLISH", "ch", "m"}));
}

TEST(SessionCommands, ATransactionMustBeWholeInOnePipeline) {
  EXPECT_THROW(check({"MULTI"}), ConfigError);
  EXPECT_THROW(check({"WATCH", "k"}), ConfigError);
  EXPECT_THROW(check({"EXEC"}), ConfigError);
  EXPECT_NO_THROW(check_pipeline({{"MULTI"}, {"INCR", "k"}, {"EXEC"}}));
  EXPECT_NO_THROW(check_pipeline({{"WATCH", "k"}, {"GET", "k"}, {"MULTI"}, {"SET", "k", "1"}, {"EXEC"}}));
  EXPECT_NO_THROW(check_pipeline({{"WATCH", "k"}, {"UNWATCH"}}));
  EXPECT_NO_THROW(check_pipeline({{"MULTI"}, {"SET", "k", "1"}, {"DISCARD"}}));
  EXPECT_THROW(check_pipeline({{"MULTI"}, {"INCR", "k"}}), ConfigError);
  EXPECT_THROW(check_pipeline({{"WATCH", "k"}, {"GET", "k"}}), ConfigError);
  EXPECT_THROW(check_pipeline({{"MULTI"}, {"MULTI"}, {"EXEC"}}), ConfigError);
  // EXEC without MULTI is an error reply, and the watch stays.
  EXPECT_THROW(check_pipeline({{"WATCH", "k"}, {"EXEC"}}), ConfigError);
  EXPECT_THROW(check_pipeline({{"WATCH", "k"}, {"DISCARD"}}), ConfigError);
}

}  // namespace
}  // namespace lockon::detail
