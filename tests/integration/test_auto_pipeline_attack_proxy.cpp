// integration/test_auto_pipeline_attack_proxy.cpp — AutoPipelineAttack
// tests driven by the fault proxy (see test_auto_pipeline_attack.cpp for the
// others): a reply cut or never sent among detached slots, and a short
// deadline passing while a reconnected shared connection's HELLO is owed.
#include <array>
#include <chrono>
#include <future>
#include <stdexcept>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "client/pipeline.hpp"
#include "integration/auto_pipeline_support.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using detail::Pipeline;

// Through a proxy: A's exchange is held 400 ms, so D1, M, D2 and C queue and
// leave in one batch of the I/O thread at ~400 ms; D1 is held 500 ms more
// (and all behind it), so D1 and D2 (deadlines ~700 and ~810 ms) are
// detached while M and C wait. (D1's reply at ~900 ms comes before the
// 600 ms socket timeout since the write, ~1005 ms.) Then M's reply is cut (half delivered, then EOF) or
// M is never answered (a stall: the 600 ms socket timeout breaks the
// connection). Either way: D1, D2 TimeoutError at their deadlines, M and C
// typed errors, and the next calls get their own replies.
void cut_or_stall_among_detached(FaultAction action) {
  RedisServer server;
  server.command({"SET", "attack:a", "A"});
  FaultProxy proxy("127.0.0.1", server.port());
  proxy.add_rule({.command = "GET", .action = FaultAction::delay, .delay = 400ms, .times = 1});
  proxy.add_rule({.command = "ECHO", .argument_contains = "d1", .action = FaultAction::delay, .delay = 500ms});
  proxy.add_rule({.command = "ECHO", .argument_contains = "mid", .action = action, .times = 1});
  Client client(pipelined_options(proxy.port(), 600ms));
  Pipeline& pipeline = pipeline_of(client);
  const std::string big(100000, 'm');
  const std::string m_payload = "mid" + big;
  auto call = [&](std::string payload, std::chrono::milliseconds within) {
    const std::array<std::string_view, 2> args{"ECHO", payload};
    const std::string got = text_of(pipeline.call(args, Clock::now() + within, "ECHO"));
    if (got != payload) throw std::logic_error("misdelivered: " + got.substr(0, 20));
    return got.substr(0, 8);
  };
  const std::array<std::string_view, 2> get_a{"GET", "attack:a"};
  const auto t0 = Clock::now();
  auto a = start(t0, [&] { return text_of(pipeline.call(get_a, Clock::now() + 5s, "GET a")); });
  std::this_thread::sleep_for(100ms);
  auto d1 = start(t0, [&] { return call("d1", 600ms); });  // deadline ~700 ms
  std::this_thread::sleep_for(30ms);
  auto m = start(t0, [&] { return call(m_payload, 5s); });
  std::this_thread::sleep_for(30ms);
  auto d2 = start(t0, [&] { return call("d2", 650ms); });  // ~810 ms
  std::this_thread::sleep_for(30ms);
  auto c = start(t0, [&] { return call("c", 5s); });
  const Outcome got_a = a.get(), got_d1 = d1.get(), got_m = m.get(), got_d2 = d2.get(), got_c = c.get();
  EXPECT_EQ(got_a.value, "A");
  for (const Outcome* o : {&got_d1, &got_d2}) {
    EXPECT_TRUE(o->timeout) << o->value;
    EXPECT_NE(o->value.find("outcome unknown"), std::string::npos) << "not detached: " << o->value;
    EXPECT_LT(o->at_ms, 950) << "not failed at its own deadline";
  }
  for (const Outcome* o : {&got_m, &got_c}) {
    EXPECT_TRUE(o->typed) << o->value;
    EXPECT_EQ(o->value.find("misdelivered"), std::string::npos) << o->value;
    EXPECT_EQ(o->value.find("untyped"), std::string::npos) << o->value;
    EXPECT_NE(o->value, "c") << "C was answered although the connection broke before its reply";
  }
  if (action == FaultAction::blackhole) {
    // No reply after D1's (~900 ms): the socket timeout runs from there.
    EXPECT_GE(got_m.at_ms, 1350);
    EXPECT_LT(got_m.at_ms, 2500);
    EXPECT_TRUE(got_m.timeout) << got_m.value;
  }
  for (int i = 0; i < 30; ++i) EXPECT_EQ(call("after-" + std::to_string(i), 2s), ("after-" + std::to_string(i)).substr(0, 8));
  EXPECT_EQ(text_of(pipeline.call(get_a, Clock::now() + 2s, "GET a")), "A");
  std::printf("[attack] A %lld ms, D1 %lld ms, M %lld ms (%s), D2 %lld ms, C %lld ms\n", got_a.at_ms, got_d1.at_ms,
              got_m.at_ms, got_m.value.substr(0, 60).c_str(), got_d2.at_ms, got_c.at_ms);
}

TEST(AutoPipelineAttack, CutReplyAmongDetachedSlotsFailsTypedAndMisdeliversNothing) {
  cut_or_stall_among_detached(FaultAction::close_mid_reply);
}

TEST(AutoPipelineAttack, StallAmongDetachedSlotsBreaksAtTheSocketTimeoutAndRecovers) {
  cut_or_stall_among_detached(FaultAction::blackhole);
}

// A's own exchange on the idle connection (GET held 400 ms by the proxy,
// then a PING after which the proxy closes the connection) fails at
// ~400 ms with the connection broken. L (5 s) and S (deadline ~460 ms),
// queued meanwhile, leave in the I/O thread's first batch on a new
// connection, behind its HELLO, which the proxy holds 400 ms. S's deadline
// passes while HELLO's reply is owed: S must fail alone (TimeoutError) and
// L get its own reply. Before the fix, the handshake's read was bounded by
// S's deadline and broke the connection, failing L too ("connection
// handshake: HELLO ... timed out"): the old rule, back through every
// reconnection. (Until a caller's own exchange stopped breaking the
// connection at its deadline, A's 200 ms deadline did the breaking.)
TEST(AutoPipelineAttack, ShortDeadlineDuringAReconnectionsHandshakeFailsAlone) {
  RedisServer server;
  server.command({"SET", "attack:hs", "V"});
  FaultProxy proxy("127.0.0.1", server.port());
  Client client(pipelined_options(proxy.port(), 3000ms));
  Pipeline& pipeline = pipeline_of(client);
  const std::array<std::string_view, 2> ping{"ECHO", "warm"};
  ASSERT_EQ(text_of(pipeline.call(ping, Clock::now() + 2s, "ECHO")), "warm");  // connection 0 is up
  proxy.add_rule({.command = "GET", .action = FaultAction::delay, .delay = 400ms, .times = 1});
  proxy.add_rule({.command = "PING", .action = FaultAction::close_after_forward, .times = 1});
  const int hello = proxy.add_rule({.command = "HELLO", .action = FaultAction::delay, .delay = 400ms, .times = 1});
  const std::array<std::string_view, 2> get{"GET", "attack:hs"};
  const std::array<std::string_view, 1> ping_a{"PING"};
  const std::array<std::span<const std::string_view>, 2> get_then_ping{get, ping_a};
  const std::array<std::string_view, 2> echo_l{"ECHO", "long"};
  const std::array<std::string_view, 2> echo_s{"ECHO", "short"};
  const auto t0 = Clock::now();
  auto a = start(t0, [&] {
    return text_of(pipeline.call_many(get_then_ping, Clock::now() + 5s, "GET+PING a").front());
  });
  std::this_thread::sleep_for(50ms);
  auto l = start(t0, [&] { return text_of(pipeline.call(echo_l, Clock::now() + 5s, "ECHO long")); });
  std::this_thread::sleep_for(10ms);
  auto s = start(t0, [&] { return text_of(pipeline.call(echo_s, Clock::now() + 400ms, "ECHO short")); });
  const Outcome got_a = a.get(), got_l = l.get(), got_s = s.get();
  EXPECT_TRUE(got_a.typed && !got_a.timeout) << got_a.value;  // ClosedError: closed after the PING
  EXPECT_EQ(proxy.matched(hello), 1u) << "no reconnection: the attack did not happen";
  EXPECT_EQ(got_l.value, "long") << "a short deadline during the handshake failed its neighbour";
  EXPECT_TRUE(got_s.timeout) << got_s.value;
  EXPECT_LT(got_s.at_ms, 600) << "S was not failed at its own deadline";
  for (int i = 0; i < 20; ++i) EXPECT_EQ(text_of(pipeline.call(get, Clock::now() + 2s, "GET")), "V");
  std::printf("[attack] handshake: A %lld ms, S %lld ms (%s), L %lld ms (%s)\n", got_a.at_ms, got_s.at_ms,
              got_s.value.substr(0, 70).c_str(), got_l.at_ms, got_l.value.substr(0, 70).c_str());
}

}  // namespace
}  // namespace lockon::test
