// integration/test_client_session.cpp — a command that would change the
// session of a shared connection is refused before it is sent. Before
// session 18, `Client::command({"SELECT", "1"})` went back to the pool in
// db 1: the next lock of that Client was taken in db 1, and a Client on
// db 0 took the same lock — two holders (found by review).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "lockon/lockon.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

class ClientSession : public RedisTest {};

TEST_F(ClientSession, SelectIsRefusedAndTheNextLockStaysInTheClientsDatabase) {
  const Client client(server().url() + "?auto_pipeline=0", PoolOptions{.size = 1});
  const Client other(server().url());
  const std::string name = key("lock");
  EXPECT_THROW(client.command({"SELECT", "1"}), ConfigError);
  EXPECT_THROW(client.command({"MULTI"}), ConfigError);
  EXPECT_THROW(client.command({"CLIENT", "REPLY", "OFF"}), ConfigError);
  Lock mine(client, name, {.ttl = 10s});
  ASSERT_TRUE(mine.try_lock());
  EXPECT_EQ(server().command({"EXISTS", name}).integer, 1) << "the lock was not taken in db 0";
  Lock rival(other, name, {.ttl = 10s});
  EXPECT_FALSE(rival.try_lock()) << "a Client on db 0 took the same lock";
  mine.unlock();
}

TEST_F(ClientSession, ABalancedTransactionInOnePipelineRunsAndAnOpenOneIsRefused) {
  const Client client(server().url() + "?auto_pipeline=0", PoolOptions{.size = 1});
  const std::string counter = key("counter");
  const auto replies = client.pipeline({{"MULTI"}, {"INCR", counter}, {"INCR", counter}, {"EXEC"}});
  ASSERT_EQ(replies.size(), 4u);
  EXPECT_EQ(server().command({"GET", counter}).str, "2");
  EXPECT_THROW(client.pipeline({{"MULTI"}, {"INCR", counter}}), ConfigError);
  // Nothing of the refused pipeline was sent, and the connection answers in step.
  EXPECT_EQ(client.command({"INCR", counter}).as_integer(), 3);
}

}  // namespace
}  // namespace lockon::test
