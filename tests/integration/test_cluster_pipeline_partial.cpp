// integration/test_cluster_pipeline_partial.cpp — Client::pipeline when part
// of it ran and the resend of the rest fails, and a WAIT that ran on two
// nodes (review of the resend-only-the-refused change).
//
// Some commands ran on the source; the refused ones are resent to the node
// the redirection names. If that resend cannot be made (the node refuses
// connections until the time bound) the caller got the ConnectError itself
// ("nothing was sent": retry) although the others had run, so retrying the
// pipeline whole ran them twice; if it was sent but its reply never came, a
// bare TimeoutError that did not say the others ran.
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/options.hpp"
#include "support/raw_connection.hpp"

#include "cluster_pipeline_redirects_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

constexpr const char* kRanNote = "other commands of the pipeline ran";
constexpr const char* kDoNotResend = "do not send the pipeline again whole";

// SIGCONT on scope exit: a frozen node must not outlive a failed assertion.
struct Resume {
  RedisServer& server;
  ~Resume() {
    if (server.paused()) server.resume();
  }
};

// INCR a and INCR c ran on the source; INCR b, refused (ASK), is resent to
// a target that takes the connection and never answers (SIGSTOP). INCR b's
// outcome is unknown (the server reads it once it runs again): an IoError,
// whose message must say that the others ran. Before: a bare TimeoutError.
TEST_F(ClusterPipelineRedirects, AResendWhoseOutcomeIsUnknownSaysTheOthersRan) {
  ConnectionOptions options = ConnectionOptions::from_url(cluster().url());
  options.socket_timeout = 300ms;  // the target's silence, well below cluster-node-timeout (2 s)
  const Client client(options);
  client.command({"GET", a_});
  begin_migration();
  move_to_target(b_);
  std::string message;
  {
    target_->pause();
    const Resume resume{*target_};
    try {
      client.pipeline({{"INCR", a_}, {"INCR", b_}, {"INCR", c_}});
      ADD_FAILURE() << "the target is frozen: INCR b can not have been answered";
    } catch (const ConnectError& e) {
      ADD_FAILURE() << "ConnectError (nothing was sent) after INCR a and INCR c ran: " << e.what();
    } catch (const IoError& e) {
      message = e.what();
    }
  }
  std::cout << "caller heard: " << message << "\n";
  EXPECT_NE(message.find(kRanNote), std::string::npos) << message;
  EXPECT_NE(message.find(kDoNotResend), std::string::npos) << message;
  EXPECT_EQ(source_get(a_).str, "11");
  EXPECT_EQ(source_get(c_).str, "31");
}

// SET a ran on the source, then WAIT 1 there; SET b was refused (ASK) and
// the WAIT was sent again after it, on the target. The source's replica is
// frozen, so no replica acknowledged SET a (the source's WAIT answers 0);
// the target's replica acknowledged SET b (1). Before: the pipeline
// answered 1, the target's count alone, as if SET a were acknowledged.
TEST_F(ClusterPipelineWaitRedirects, AResentWaitAnswersTheFewestAcknowledgments) {
  const Client client(cluster().url());
  client.command({"GET", a_});
  begin_migration();
  move_to_target(b_);
  RedisServer& source_replica = cluster().replica_of(*source_);
  std::vector<Reply> replies;
  {
    source_replica.pause();
    const Resume resume{source_replica};
    replies = client.pipeline({{"SET", a_, "x"}, {"SET", b_, "y"}, {"WAIT", "1", "200"}});
  }
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[0].as_string(), "OK");
  EXPECT_EQ(replies[1].as_string(), "OK");
  EXPECT_EQ(replies[2].as_integer(), 0) << "WAIT answered the target's acknowledgment of SET b for SET a too";
  EXPECT_EQ(target_ask({"GET", b_}).str, "y");
  // The target's replica does acknowledge (what the old answer reported).
  EXPECT_EQ(target_ask({"WAIT", "1", "1000"}).integer, 1);
}

// Kills a node and leaves it dead: its own suite, whose cluster is thrown
// away after it (ClusterTest::TearDownTestSuite); no slot moves back.
class ClusterPipelineResendToADeadNode : public ClusterPipelineRedirects {
 protected:
  void TearDown() override {}
};

// The slot moved for good after the client read the map; its new owner is
// then killed. The old owner runs the keyless PUBLISH and answers MOVED to
// INCR a, whose resend is refused a connection until the time bound (1 s,
// before any failover: cluster-node-timeout is 2 s). PUBLISH ran, so this
// is the partly-ran ReplyError (MOVED). Before: ConnectError ("nothing was
// sent").
TEST_F(ClusterPipelineResendToADeadNode, ARefusedResendAfterOthersRanIsAReplyErrorNotConnectError) {
  const Client client(cluster().url());
  client.command({"GET", a_});  // the map is read: the slot is on the source
  begin_migration();
  finish_migration();
  const std::string channel = key("channel");
  RawConnection listener = source_->connect();
  ASSERT_EQ(listener.command({"SUBSCRIBE", channel}).elements.size(), 3u);
  target_->kill();
  std::string code;
  std::string message;
  try {
    client.pipeline({{"PUBLISH", channel, "once"}, {"INCR", a_}});
    ADD_FAILURE() << "INCR a's owner is dead: it can not have run";
  } catch (const ConnectError& e) {
    ADD_FAILURE() << "ConnectError (nothing was sent), but PUBLISH ran: " << e.what();
  } catch (const ServerBusyError& e) {
    ADD_FAILURE() << "ServerBusyError (retry may succeed), but PUBLISH ran: " << e.what();
  } catch (const ReplyError& e) {
    code = e.code();
    message = e.what();
  } catch (const Error& e) {
    ADD_FAILURE() << "unexpected error: " << e.what();
  }
  std::cout << "caller heard: " << message << "\n";
  EXPECT_EQ(code, "MOVED") << message;
  EXPECT_NE(message.find("INCR"), std::string::npos) << message;
  EXPECT_NE(message.find(kDoNotResend), std::string::npos) << message;
  listener.set_command_timeout(500ms);
  int messages = 0;
  for (int i = 0; i < 5; ++i) {
    try {
      const RawReply published = listener.next_reply();
      if (published.elements.size() == 3 && published.elements[2].str == "once") ++messages;
    } catch (const RawIoError&) {
      break;  // nothing more within 500 ms
    }
  }
  EXPECT_EQ(messages, 1) << "PUBLISH ran on the old owner once";
}

}  // namespace
}  // namespace lockon::test
