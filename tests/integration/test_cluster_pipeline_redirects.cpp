// integration/test_cluster_pipeline_redirects.cpp — Client::pipeline while
// the pipeline's slot moves. During a migration the source runs the
// commands whose keys it still has and refuses the others (ASK, TRYAGAIN);
// after it, the old owner answers MOVED to every keyed command while
// keyless ones run. Client::pipeline resent the whole pipeline on any such
// reply, so what had run ran again on the target: INCR a, INCR b, INCR c
// with only b moved answered 1, 21, 1 (found by review, session 19). Only
// the refused commands (a refused transaction whole) may be sent again.
#include <chrono>
#include <string>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "support/raw_connection.hpp"

#include "cluster_pipeline_redirects_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

// Only b moved: INCR a and INCR c run on the source, INCR b is refused (ASK)
// and is the only one sent to the target. Before: 1, 21, 1 (a and c
// created again on the target).
TEST_F(ClusterPipelineRedirects, OnlyTheRefusedCommandGoesToTheAskTarget) {
  const Client client(cluster().url());
  client.command({"GET", a_});  // the map is read: the pipeline goes to the source
  begin_migration();
  move_to_target(b_);
  const auto replies = client.pipeline({{"INCR", a_}, {"INCR", b_}, {"INCR", c_}});
  EXPECT_EQ(integers(replies), (std::vector<long long>{11, 21, 31}));
  EXPECT_EQ(source_get(a_).str, "11");
  EXPECT_EQ(source_get(c_).str, "31");
  EXPECT_EQ(target_ask({"GET", b_}).str, "21");
  EXPECT_EQ(target_ask({"EXISTS", a_}).integer, 0) << "INCR a ran again on the target";
  EXPECT_EQ(target_ask({"EXISTS", c_}).integer, 0) << "INCR c ran again on the target";
  EXPECT_EQ(source_->command({"EXISTS", b_}).integer, 0);
}

// A transaction over the moved key: INCR b is refused inside it, so EXEC
// answers EXECABORT on the source and nothing of it ran; it is resent whole
// (MULTI ... EXEC, ASKING before MULTI). The commands around it ran once.
TEST_F(ClusterPipelineRedirects, ARefusedTransactionIsResentWholeAndTheCommandsAroundItRunOnce) {
  const Client client(cluster().url());
  client.command({"GET", a_});
  begin_migration();
  move_to_target(b_);
  const auto replies = client.pipeline({{"INCR", a_}, {"MULTI"}, {"INCR", b_}, {"EXEC"}, {"INCR", c_}});
  ASSERT_EQ(replies.size(), 5u);
  EXPECT_EQ(replies[0].as_integer(), 11);
  EXPECT_EQ(replies[1].as_string(), "OK");
  EXPECT_EQ(replies[2].as_string(), "QUEUED");
  ASSERT_EQ(replies[3].type(), Reply::Type::array);
  ASSERT_EQ(replies[3].elements().size(), 1u);
  EXPECT_EQ(replies[3].elements()[0].as_integer(), 21);
  EXPECT_EQ(replies[4].as_integer(), 31);
  EXPECT_EQ(source_get(a_).str, "11");
  EXPECT_EQ(source_get(c_).str, "31");
  EXPECT_EQ(target_ask({"GET", b_}).str, "21");
  EXPECT_EQ(target_ask({"EXISTS", a_}).integer, 0) << "INCR a ran again on the target";
  EXPECT_EQ(target_ask({"EXISTS", c_}).integer, 0) << "INCR c ran again on the target";
}

// A transaction over b (moved) and c (still on the source) can run on
// neither node until the migration ends: EXECABORT on the source, TRYAGAIN
// on the target (its keys are split) until the time bound. INCR a, which
// ran, is never sent again, and the error is not ServerBusyError ("retry
// may succeed"): retrying the pipeline whole would run INCR a twice.
TEST_F(ClusterPipelineRedirects, ATransactionOverASplitSlotDoesNotRunAndWhatRanIsNotResent) {
  const Client client(cluster().url());
  client.command({"GET", a_});
  begin_migration();
  move_to_target(b_);
  bool thrown = false;
  try {
    client.pipeline({{"INCR", a_}, {"MULTI"}, {"INCR", b_}, {"INCR", c_}, {"EXEC"}});
  } catch (const ServerBusyError& e) {
    ADD_FAILURE() << "ServerBusyError (retry may succeed) after INCR a ran: " << e.what();
    thrown = true;
  } catch (const ReplyError& e) {
    EXPECT_EQ(e.code(), "TRYAGAIN") << e.what();
    thrown = true;
  }
  EXPECT_TRUE(thrown) << "the transaction can not have run";
  EXPECT_EQ(source_get(a_).str, "11");
  EXPECT_EQ(source_get(c_).str, "30");
  EXPECT_EQ(target_ask({"GET", b_}).str, "20");
  EXPECT_EQ(target_ask({"EXISTS", a_}).integer, 0) << "INCR a ran again on the target";
  EXPECT_EQ(target_ask({"EXISTS", c_}).integer, 0) << "INCR c ran on the target";
}

// WATCH b is refused (b moved) while the transaction it guards (INCR a)
// commits on the source. Nothing is resent (a WATCH alone on the target
// would stay live on a pooled connection; the transaction ran already): the
// refusal is reported as a ReplyError, not ServerBusyError. One connection
// per node: later transactions on both nodes, over keys changed meanwhile,
// must commit (no WATCH left live).
TEST_F(ClusterPipelineRedirects, APipelineWithWatchRefusedInPartIsNotResent) {
  const Client client(cluster().url(), PoolOptions{.size = 1});
  client.command({"GET", a_});
  begin_migration();
  move_to_target(b_);
  bool thrown = false;
  try {
    client.pipeline({{"WATCH", b_}, {"MULTI"}, {"INCR", a_}, {"EXEC"}});
  } catch (const ServerBusyError& e) {
    ADD_FAILURE() << "ServerBusyError (retry may succeed) after the transaction committed: " << e.what();
    thrown = true;
  } catch (const ReplyError& e) {
    EXPECT_EQ(e.code(), "ASK") << e.what();
    thrown = true;
  }
  EXPECT_TRUE(thrown) << "WATCH was refused: the caller must hear of it";
  EXPECT_EQ(source_get(a_).str, "11");
  EXPECT_EQ(target_ask({"EXISTS", a_}).integer, 0) << "the transaction ran again on the target";
  // Touch every key a live WATCH could be on, on both nodes.
  ASSERT_EQ(source_->command({"INCR", a_}).integer, 12);
  ASSERT_EQ(target_ask({"INCR", b_}).integer, 21);
  const auto on_source = client.pipeline({{"MULTI"}, {"INCR", a_}, {"EXEC"}});
  ASSERT_EQ(on_source.size(), 3u);
  ASSERT_EQ(on_source[2].type(), Reply::Type::array) << "the transaction on the source was aborted";
  EXPECT_EQ(on_source[2].elements()[0].as_integer(), 13);
  const auto on_target = client.pipeline({{"MULTI"}, {"INCR", b_}, {"EXEC"}});
  ASSERT_EQ(on_target.size(), 3u);
  ASSERT_EQ(on_target[2].type(), Reply::Type::array) << "the transaction on the target was aborted";
  EXPECT_EQ(on_target[2].elements()[0].as_integer(), 22);
}

// The slot moved for good after the client read the map: the old owner
// answers MOVED to both INCRs and runs the keyless PUBLISH. Only the INCRs
// go to the new owner; the message is published once.
TEST_F(ClusterPipelineRedirects, AfterMovedOnlyTheRefusedCommandsGoToTheNewOwner) {
  const Client client(cluster().url());
  client.command({"GET", a_});
  begin_migration();
  finish_migration();
  const std::string channel = key("channel");
  RedisServer* bystander = nullptr;  // neither the old nor the new owner
  for (RedisServer* master : cluster().masters())
    if (master != source_ && master != target_) bystander = master;
  ASSERT_NE(bystander, nullptr);
  RawConnection listener = bystander->connect();
  ASSERT_EQ(listener.command({"SUBSCRIBE", channel}).elements.size(), 3u);
  const auto replies = client.pipeline({{"INCR", a_}, {"PUBLISH", channel, "once"}, {"INCR", b_}});
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[0].as_integer(), 11);
  EXPECT_EQ(replies[1].as_integer(), 0);  // the listener is on another node
  EXPECT_EQ(replies[2].as_integer(), 21);
  listener.set_command_timeout(500ms);
  int messages = 0;
  for (int i = 0; i < 5; ++i) {
    try {
      const RawReply message = listener.next_reply();
      if (message.elements.size() == 3 && message.elements[2].str == "once") ++messages;
    } catch (const RawIoError&) {
      break;  // nothing more within 500 ms
    }
  }
  EXPECT_EQ(messages, 1) << "PUBLISH ran again on the new owner";
  EXPECT_EQ(target_->command({"GET", a_}).str, "11");
  EXPECT_EQ(target_->command({"GET", b_}).str, "21");
  EXPECT_EQ(target_->command({"GET", c_}).str, "30");
  EXPECT_EQ(source_->command({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot_)}).integer, 0);
}

// WAIT after a refused INCR b: it ran on the source (after INCR a) and is
// sent again on the target after INCR b, whose replication it waits for.
TEST_F(ClusterPipelineWaitRedirects, AWaitAfterARefusedCommandIsSentAgainAfterIt) {
  const Client client(cluster().url());
  client.command({"GET", a_});
  begin_migration();
  move_to_target(b_);
  RawConnection target = target_->connect();
  const long long waits_before = commandstats_calls(target, "wait");
  const auto replies = client.pipeline({{"INCR", a_}, {"INCR", b_}, {"WAIT", "1", "5000"}});
  EXPECT_EQ(integers(replies), (std::vector<long long>{11, 21, 1}));
  EXPECT_EQ(commandstats_calls(target, "wait") - waits_before, 1) << "WAIT did not follow INCR b to the target";
  EXPECT_EQ(source_get(a_).str, "11");
  EXPECT_EQ(target_ask({"GET", b_}).str, "21");
  EXPECT_EQ(target_ask({"EXISTS", a_}).integer, 0) << "INCR a ran again on the target";
}

}  // namespace
}  // namespace lockon::test
