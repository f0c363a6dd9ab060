// PipelineResends (client/routed_pipeline.hpp) without a server: what the
// caller hears once part of a cluster pipeline ran, and a WAIT's answer
// when it ran on two nodes. The behaviour on a real cluster is in
// integration/test_cluster_pipeline_partial.cpp; here the cases a cluster
// test can not reach cheaply (WAITAOF, PoolTimeoutError, no master).
#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "client/routed_pipeline.hpp"
#include "lockon/errors.hpp"
#include "resp_reply.hpp"

namespace lockon::detail {
namespace {

using test_resp::parse;

std::vector<ReplyPtr> replies(std::initializer_list<std::string> resp) {
  std::vector<ReplyPtr> parsed;
  for (const std::string& one : resp) parsed.push_back(parse(one));
  return parsed;
}

// SET {t}a, SET {t}b, then a wait: the commands of every test below.
struct Pipeline {
  explicit Pipeline(std::vector<std::string_view> wait) : wait_(std::move(wait)) {}
  std::vector<std::string_view> set_a{"SET", "{t}a", "1"};
  std::vector<std::string_view> set_b{"SET", "{t}b", "1"};
  std::vector<std::string_view> wait_;
  std::vector<PipelineResends::Command> commands{set_a, set_b, wait_};
};

const std::string kAsk = "-ASK 15495 127.0.0.1:7002\r\n";

// SET a ran on the source and SET b was refused; the source's WAIT is
// resent after SET b (file comment of routed_pipeline.hpp).
PipelineResends refused_b(const Pipeline& pipeline, const std::string& source_wait) {
  PipelineResends resends(pipeline.commands);
  const auto again = resends.record(replies({"+OK\r\n", kAsk, source_wait}), "127.0.0.1:7000");
  EXPECT_EQ(again.size(), 2u);
  EXPECT_EQ(resends.batch().size(), 2u);
  return resends;
}

TEST(PipelineResends, AResentWaitAnswersTheFewestAcknowledgmentsOfTheNodesItRanOn) {
  const Pipeline pipeline({"WAIT", "1", "100"});
  PipelineResends resends = refused_b(pipeline, ":0\r\n");  // SET a: no replica acknowledged
  EXPECT_TRUE(resends.record(replies({"+OK\r\n", ":1\r\n"}), "127.0.0.1:7002").empty());
  const auto all = resends.finish({});
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2]->integer, 0) << "the target's 1 covers SET b only";
}

TEST(PipelineResends, AResentWaitKeepsTheTargetsCountWhenItIsTheFewer) {
  const Pipeline pipeline({"WAIT", "2", "100"});
  PipelineResends resends = refused_b(pipeline, ":2\r\n");
  EXPECT_TRUE(resends.record(replies({"+OK\r\n", ":1\r\n"}), "127.0.0.1:7002").empty());
  EXPECT_EQ(resends.finish({})[2]->integer, 1);
}

TEST(PipelineResends, AResentWaitaofTakesTheFewerOfEachCount) {
  const Pipeline pipeline({"WAITAOF", "1", "1", "100"});
  PipelineResends resends = refused_b(pipeline, "*2\r\n:1\r\n:0\r\n");  // local fsynced, no replica
  EXPECT_TRUE(resends.record(replies({"+OK\r\n", "*2\r\n:0\r\n:1\r\n"}), "127.0.0.1:7002").empty());
  const auto all = resends.finish({});
  ASSERT_EQ(all[2]->elements, 2u);
  EXPECT_EQ(all[2]->element[0]->integer, 0);
  EXPECT_EQ(all[2]->element[1]->integer, 0);
}

// The resend failed before anything of it was sent: the partly-ran
// ReplyError with the refusal's code, never the error itself ("retry").
TEST(PipelineResends, AResendThatSentNothingAfterOthersRanIsTheRefusal) {
  const Pipeline pipeline({"WAIT", "1", "100"});
  for (const std::exception_ptr& error :
       {std::make_exception_ptr(ConnectError("connect on 127.0.0.1:7002: refused")),
        std::make_exception_ptr(PoolTimeoutError("no connection to 127.0.0.1:7002")),
        std::make_exception_ptr(ServerBusyError("no master serves slot 15495", "CLUSTERDOWN"))}) {
    const PipelineResends resends = refused_b(pipeline, ":0\r\n");
    try {
      resends.the_rest_failed(error);
    } catch (const ServerBusyError& e) {
      ADD_FAILURE() << "ServerBusyError after SET a ran: " << e.what();
    } catch (const ReplyError& e) {
      EXPECT_EQ(e.code(), "ASK");
      const std::string message = e.what();
      EXPECT_NE(message.find("SET on 127.0.0.1:7000"), std::string::npos) << message;
      EXPECT_NE(message.find("do not send the pipeline again whole"), std::string::npos) << message;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not the partly-ran ReplyError: " << e.what();
    }
  }
}

// The resend may have been sent: the same IoError class, saying others ran.
TEST(PipelineResends, AResendWithAnUnknownOutcomeAfterOthersRanSaysSo) {
  const Pipeline pipeline({"WAIT", "1", "100"});
  const PipelineResends resends = refused_b(pipeline, ":0\r\n");
  try {
    resends.the_rest_failed(std::make_exception_ptr(TimeoutError("pipeline on 127.0.0.1:7002: timed out")));
  } catch (const TimeoutError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("other commands of the pipeline ran"), std::string::npos) << message;
    EXPECT_NE(message.find("may or may not have run"), std::string::npos) << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a TimeoutError: " << e.what();
  }
}

// Nothing ran yet (the first attempt failed): the error as it is.
TEST(PipelineResends, AFailureBeforeAnythingRanIsThrownAsIs) {
  const Pipeline pipeline({"WAIT", "1", "100"});
  const PipelineResends resends(pipeline.commands);
  EXPECT_THROW(resends.the_rest_failed(std::make_exception_ptr(ConnectError("refused"))), ConnectError);
}

// Refused again until the bound while SET a ran: the partly-ran ReplyError.
TEST(PipelineResends, ARefusalLeftNextToWhatRanIsAReplyError) {
  const Pipeline pipeline({"WAIT", "1", "100"});
  PipelineResends resends = refused_b(pipeline, ":0\r\n");
  auto last = resends.record(replies({"-TRYAGAIN Multiple keys request during rehashing of slot\r\n", ":1\r\n"}),
                             "127.0.0.1:7002");
  try {
    resends.finish(std::move(last));
    ADD_FAILURE() << "SET b never ran";
  } catch (const ServerBusyError& e) {
    ADD_FAILURE() << "ServerBusyError after SET a ran: " << e.what();
  } catch (const ReplyError& e) {
    EXPECT_EQ(e.code(), "TRYAGAIN") << e.what();
  }
}

}  // namespace
}  // namespace lockon::detail
