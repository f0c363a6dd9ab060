// unit/test_redlock_units.cpp — Redlock's pure helpers (no server needed).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "client/slots.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/redlock.hpp"
#include "redlock/redlock_nodes.hpp"

namespace lockon::detail {
namespace {

using namespace std::chrono_literals;

TEST(RedlockUnits, ParseCounterAcceptsOnlyCanonicalUint64) {
  EXPECT_EQ(parse_counter("0"), 0u);
  EXPECT_EQ(parse_counter("42"), 42u);
  EXPECT_EQ(parse_counter("18446744073709551615"), 18446744073709551615u);
  EXPECT_EQ(parse_counter("18446744073709551616"), std::nullopt);  // 2^64
  EXPECT_EQ(parse_counter("99999999999999999999"), std::nullopt);
  EXPECT_EQ(parse_counter("123456789012345678901"), std::nullopt);
  EXPECT_EQ(parse_counter(""), std::nullopt);
  EXPECT_EQ(parse_counter("007"), std::nullopt);  // the Lua max-update compares lengths
  EXPECT_EQ(parse_counter("-1"), std::nullopt);
  EXPECT_EQ(parse_counter("1.5"), std::nullopt);
  EXPECT_EQ(parse_counter(" 1"), std::nullopt);
}

TEST(RedlockUnits, DriftAllowanceIsTtlTimesFactorPlusTwoMilliseconds) {
  EXPECT_EQ(drift_allowance(10s, 0.01), 102ms);
  EXPECT_EQ(drift_allowance(100ms, 0.01), 3ms);
  EXPECT_EQ(drift_allowance(1s, 0.0), 2ms);
  EXPECT_EQ(drift_allowance(150ms, 0.01), std::chrono::microseconds(3500));
}

TEST(RedlockUnits, AutomaticPerNodeTimeoutIsSmallAgainstTheTtl) {
  EXPECT_EQ(auto_per_node_timeout(60s), 200ms);
  EXPECT_EQ(auto_per_node_timeout(30s), 200ms);
  EXPECT_EQ(auto_per_node_timeout(10s), 100ms);
  EXPECT_EQ(auto_per_node_timeout(5s), 50ms);
  EXPECT_EQ(auto_per_node_timeout(1s), 25ms);
  EXPECT_EQ(auto_per_node_timeout(100ms), 25ms);
  EXPECT_EQ(auto_per_node_timeout(60ms), 15ms);
  EXPECT_EQ(auto_per_node_timeout(2ms), 1ms);
}

TEST(RedlockUnits, FanOutWindowIsThePerNodeTimeoutCutToTheCallersDeadlineSaveOneRoundTrip) {
  const RedlockNodes::Clock::time_point start{std::chrono::seconds(1000)};
  const auto never = RedlockNodes::Clock::time_point::max();
  EXPECT_EQ(RedlockNodes::window(start, 200ms, never), start + 200ms);
  EXPECT_EQ(RedlockNodes::window(start, 200ms, start + 300ms), start + 200ms);
  EXPECT_EQ(RedlockNodes::window(start, 200ms, start + 50ms), start + 50ms);
  EXPECT_EQ(RedlockNodes::window(start, 200ms, start + 1ms), start + RedlockNodes::kOneRoundTrip);
  EXPECT_EQ(RedlockNodes::window(start, 200ms, start - 1s), start + RedlockNodes::kOneRoundTrip);
  EXPECT_EQ(RedlockNodes::window(start, 2ms, start - 1s), start + 2ms);  // never past the per-node timeout
}

// A fake acquire_fenced reply {granted, counter, time µs}.
struct FencedReply {
  redisReply granted{}, counter{}, micros{};
  redisReply* elements[3] = {&granted, &counter, &micros};
  redisReply array{};
  std::string counter_text, micros_text;
  FencedReply(std::string c, std::string t) : counter_text(std::move(c)), micros_text(std::move(t)) {
    granted.type = REDIS_REPLY_INTEGER;
    granted.integer = 1;
    for (auto [reply, text] : {std::pair{&counter, &counter_text}, std::pair{&micros, &micros_text}}) {
      reply->type = REDIS_REPLY_STRING;
      reply->str = text->data();
      reply->len = text->size();
    }
    array.type = REDIS_REPLY_ARRAY;
    array.elements = 3;
    array.element = elements;
  }
};

TEST(RedlockUnits, FenceCandidateIsTheCounterPlusOneButNeverBelowTheServerClock) {
  EXPECT_EQ(fence_candidate(FencedReply("0", "1763870000000000").array), 1763870000000000u);  // emptied counter
  EXPECT_EQ(fence_candidate(FencedReply("1763870000000000", "1763870000000000").array), 1763870000000001u);
  EXPECT_EQ(fence_candidate(FencedReply("1763870000000005", "1763870000000001").array), 1763870000000006u);
  EXPECT_EQ(fence_candidate(FencedReply("18446744073709551615", "1").array), 18446744073709551615u);  // saturates
  EXPECT_EQ(fence_candidate(FencedReply("x", "1").array), std::nullopt);
  EXPECT_EQ(fence_candidate(FencedReply("1", "").array), std::nullopt);
  FencedReply short_reply("1", "2");
  short_reply.array.elements = 2;  // the pre-clock script's shape
  EXPECT_EQ(fence_candidate(short_reply.array), std::nullopt);
}

TEST(RedlockUnits, RedactRemovesEveryOccurrenceOfTheToken) {
  EXPECT_EQ(redact("a tok b tok", "tok"), "a <token> b <token>");
  EXPECT_EQ(redact("nothing here", "tok"), "nothing here");
  EXPECT_EQ(redact("keep", ""), "keep");
  // A custom token that occurs in the mark itself must not loop forever.
  EXPECT_EQ(redact("e-e", "e"), "<token>-<token>");
  EXPECT_EQ(redact("<token>", "<token>"), "<token>");
}

TEST(RedlockUnits, FenceCounterSharesTheKeysHashSlot) {
  EXPECT_EQ(companion_key("orders:42", "fence"), "{orders:42}:fence");
  EXPECT_EQ(companion_key("{orders}:42", "fence"), "{orders}:42:fence");
  EXPECT_EQ(companion_key("{}x", "fence"), "{" + tag_for_slot(key_slot("{}x")) + "}{}x:fence");  // empty tag: not a tag
}

TEST(RedlockUnits, EnumNames) {
  EXPECT_EQ(to_string(NodeOperation::probe), "probe");
  EXPECT_EQ(to_string(NodeOperation::acquire), "acquire");
  EXPECT_EQ(to_string(NodeOperation::fence), "fence");
  EXPECT_EQ(to_string(NodeOperation::extend), "extend");
  EXPECT_EQ(to_string(NodeOperation::release), "release");
  EXPECT_EQ(to_string(NodeOperation::check), "check");
  EXPECT_EQ(to_string(NodeOutcome::ok), "ok");
  EXPECT_EQ(to_string(NodeOutcome::refused), "refused");
  EXPECT_EQ(to_string(NodeOutcome::failed), "failed");
}

TEST(RedlockUnits, NoNodesOrARepeatedEndpointIsRejected) {
  EXPECT_THROW(RedlockNodes({}, "x", 10ms, {}), ConfigError);
  EXPECT_THROW(RedlockNodes({Client("redis://127.0.0.1:7001"), Client("redis://127.0.0.1:7001/2")}, "x", 10ms, {}),
               ConfigError);
  const RedlockNodes nodes({Client("redis://127.0.0.1:7001"), Client("redis://127.0.0.1:7002"),
                            Client("redis://127.0.0.1:7003")},
                           "x", 10ms, {});
  EXPECT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes.quorum(), 2u);
  EXPECT_EQ(nodes.endpoint(1), "127.0.0.1:7002");
}

}  // namespace
}  // namespace lockon::detail
