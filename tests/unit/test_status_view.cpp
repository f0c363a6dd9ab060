// unit/test_status_view.cpp — `lockon status`'s reading of holder records
// (src/protocol/holder_record.hpp's format) and its JSON escaping.
#include <gtest/gtest.h>
#include <unistd.h>

#include "protocol/holder_record.hpp"
#include "status_view.hpp"

namespace lockon::cli {
namespace {

TEST(StatusView, ParsesARecordTheLibraryWrites) {
  const std::string text = lockon::detail::holder_record("0123456789abcdef", "night|ly\nbackup");
  const auto record = parse_holder_record(text);
  ASSERT_TRUE(record.has_value()) << text;
  EXPECT_EQ(record->token_prefix, "01234567") << "only 8 characters of the token are stored";
  EXPECT_EQ(record->pid, static_cast<long long>(::getpid()));
  EXPECT_EQ(record->label, "night_ly_backup") << "'|' and control characters are replaced";
  EXPECT_GT(record->process_start_ms, 1'000'000'000'000LL);
  EXPECT_GE(record->since_ms, record->process_start_ms);
  EXPECT_FALSE(record->host.empty());
  EXPECT_EQ(describe_who(*record), "host=" + record->host + " pid=" + std::to_string(::getpid()) +
                                       " label=night_ly_backup");
}

TEST(StatusView, RejectsMalformedRecords) {
  EXPECT_FALSE(parse_holder_record(""));
  EXPECT_FALSE(parse_holder_record("a|h|1|2|l"));
  EXPECT_FALSE(parse_holder_record("a|h|x|2|l|3"));
  EXPECT_FALSE(parse_holder_record("a|h|1|2|l|3|extra"));
  EXPECT_FALSE(parse_holder_record("a|h|1|2|l|"));
  EXPECT_TRUE(parse_holder_record("a|h|1|2||3"));
}

TEST(StatusView, WaitersAreMatchedByWaiterIdAndTimedByTheServerClock) {
  const std::vector<std::string> queue{"sid|w1|30000|0|tok1", "sid|w2|30000|1|tok2", "sid|w3|30000|0|tok3"};
  const std::vector<std::string> qwho{"w2", "tok2abcd|h2|22|1|b|9000", "w1", "tok1abcd|h1|11|1|a|8000"};
  const Waiters w = read_waiters(queue, qwho, 10'000);
  EXPECT_EQ(w.count, 3u);
  ASSERT_EQ(w.who.size(), 3u);
  ASSERT_TRUE(w.who[0].who);
  EXPECT_EQ(w.who[0].who->label, "a");
  EXPECT_EQ(w.who[0].waiting_ms, 2000);
  EXPECT_EQ(w.who[1].waiting_ms, 1000);
  EXPECT_FALSE(w.who[2].who) << "an entry without a record (older client) is counted, not described";
  EXPECT_EQ(w.longest_ms, 2000);
}

TEST(StatusView, JsonStringsAreEscaped) {
  EXPECT_EQ(json_string("plain"), "\"plain\"");
  EXPECT_EQ(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(json_string("l\nt\tr\r"), "\"l\\nt\\tr\\r\"");
  EXPECT_EQ(json_string(std::string("\x01\x1f\x7f", 3)), "\"\\u0001\\u001f\\u007f\"");
  EXPECT_EQ(json_string("caf\xc3\xa9"), "\"caf\xc3\xa9\"") << "UTF-8 passes through";
  HolderRecord r{"tok", "h\"ost", 7, 8, "x\\y", 9};
  EXPECT_EQ(json_who(r), "{\"host\":\"h\\\"ost\",\"pid\":7,\"process_start_ms\":8,\"label\":\"x\\\\y\"}");
}

}  // namespace
}  // namespace lockon::cli
