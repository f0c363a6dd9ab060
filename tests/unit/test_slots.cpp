// The hash-slot helper (client/slots.hpp) against answers of a real
// cluster node (CLUSTER KEYSLOT on redis-server 7.0.15, recorded below),
// the companion keys' slots, and the spread of lock_on keys over slots.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "client/slots.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/lockon.hpp"

namespace {

using lockon::detail::companion_key;
using lockon::detail::key_slot;
using lockon::detail::wake_channel;

TEST(Slots, Crc16MatchesTheXmodemCheckValue) { EXPECT_EQ(lockon::detail::crc16("123456789"), 0x31C3); }

TEST(Slots, KeySlotsMatchClusterKeyslot) {
  // `redis-cli -p P CLUSTER KEYSLOT <key>` on a cluster-enabled 7.0.15.
  const std::vector<std::pair<std::string, int>> known{
      {"foo", 12182},         {"bar", 5061},          {"123456789", 12739},      {"a{}b", 13694},
      {"{a{}b}:q", 14311},    {"{user1000}.following", 3443}, {"foo{}{bar}", 8363}, {"foo{{bar}}zap", 4015},
      {"foo{bar}{zap}", 5061}, {"}x{y}", 12222},      {"lock:orders:42", 316},   {"", 0},
      {"{", 4092}};
  for (const auto& [key, slot] : known) EXPECT_EQ(key_slot(key), slot) << "key '" << key << "'";
}

TEST(Slots, TagForSlotCoversEverySlotWithoutBraces) {
  for (int slot = 0; slot < lockon::detail::kClusterSlots; ++slot) {
    const std::string& tag = lockon::detail::tag_for_slot(slot);
    ASSERT_FALSE(tag.empty()) << slot;
    ASSERT_EQ(tag.find_first_of("{}"), std::string::npos);
    ASSERT_EQ(key_slot(tag), slot);
  }
  EXPECT_THROW(lockon::detail::tag_for_slot(16384), std::out_of_range);
}

// Names that exercise every branch of companion_key, including the two that
// the old rule got wrong (an empty "{}" and a '}' before the first '{').
const std::vector<std::string> kAwkwardNames{
    "orders:42", "{orders}:42", "a{}b", "{}x", "}x{y}", "x}", "{", "}", "{{}}", "a{b}c{d}", "{}{", "lock|\x01\x02",
    "lockon:84a0f3455dcca894ace136be62efa292:lock|9c7971fd1ce3caadcae959b850c8d9a5"};

TEST(Slots, CompanionKeysAndChannelsShareTheLockKeysSlot) {
  std::set<std::string> seen;
  for (const std::string& name : kAwkwardNames) {
    const int slot = key_slot(name);
    for (const char* suffix : {"q", "fence", "hf", "who", "qwho"}) {
      const std::string companion = companion_key(name, suffix);
      EXPECT_EQ(key_slot(companion), slot) << "'" << name << "' + " << suffix << " = '" << companion << "'";
      EXPECT_TRUE(seen.insert(companion).second) << "two names share companion '" << companion << "'";
    }
    const std::string channel = wake_channel(name, "0123abcd");
    EXPECT_EQ(key_slot(channel), slot) << channel;
    // The scripts derive the channel from the queue key: "...q" -> "...wake:<id>".
    const std::string queue = companion_key(name, "q");
    EXPECT_EQ(queue.substr(0, queue.size() - 1) + "wake:0123abcd", channel);
    // ... and the holder records (protocol/holder_record.hpp) the same way.
    EXPECT_EQ(queue.substr(0, queue.size() - 1) + "who", companion_key(name, "who"));
    EXPECT_EQ(queue.substr(0, queue.size() - 1) + "qwho", companion_key(name, "qwho"));
  }
  // The old rule's mistake, pinned: "{a{}b}:q" would hash "a{".
  EXPECT_NE(companion_key("a{}b", "q"), "{a{}b}:q");
  EXPECT_EQ(companion_key("orders:42", "q"), "{orders:42}:q");
  EXPECT_EQ(companion_key("{orders}:42", "q"), "{orders}:42:q");
}

// The queue scripts' KEYS, in the order the scripts index them, all in the
// lock key's slot.
TEST(Slots, LockScriptKeysAreTheSixCompanionsInScriptOrder) {
  using lockon::detail::companion_key;
  const auto keys = lockon::detail::lock_script_keys("orders:42");
  const std::vector<std::string> expected{"orders:42",      "{orders:42}:q",    "{orders:42}:fence", "{orders:42}:hf",
                                          "{orders:42}:who", "{orders:42}:qwho", "{orders:42}:hs"};
  ASSERT_EQ(keys.size(), expected.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(keys[i], expected[i]);
    EXPECT_EQ(lockon::detail::key_slot(keys[i]), lockon::detail::key_slot("orders:42")) << keys[i];
  }
}

// Every script names only the keys LockCalls passes (run_lock_script:
// lock_script_keys(), seven; run1: lock and holder record, the latter
// optional; renewals and extensions add the hand-over subscriber record,
// run1_as_process), all of which share a slot (test above), builds no key name of
// its own (Redis's rule that every key a script touches is declared; the
// integration test ScriptKeys checks the keys actually touched), and
// publishes only on a channel derived from KEYS[2].
TEST(Slots, EveryScriptUsesOnlyItsDeclaredKeys) {
  namespace s = lockon::detail::scripts;
  struct Entry {
    const char* name;
    const lockon::detail::Script& script;
    int keys;
  };
  const int all = static_cast<int>(lockon::detail::kLockScriptKeys);
  const std::vector<Entry> scripts{{"wait_attempt", s::wait_attempt(), all}, {"fenced_acquire", s::fenced_acquire(), 2},
                                   {"release", s::release(), all},          {"cancel_wait", s::cancel_wait(), all},
                                   {"extend", s::extend(), 3},            {"renew", s::renew(), 3}};
  const std::regex key_ref(R"(KEYS\[(\d+)\])");
  for (const Entry& entry : scripts) {
    const std::string& body = entry.script.body();
    int highest = 0;
    for (auto it = std::sregex_iterator(body.begin(), body.end(), key_ref); it != std::sregex_iterator(); ++it)
      highest = std::max(highest, std::stoi((*it)[1]));
    EXPECT_GE(highest, 1) << entry.name;
    EXPECT_LE(highest, entry.keys) << entry.name << " reads a key its caller does not pass";
    // Key names derived in Lua (the holder records once were): only the
    // wake-up channel's prefix may be built from a key, and it is a channel.
    for (const char* derived : {".. 'who'", ".. 'qwho'", ".. 'q'", ".. 'fence'", ".. 'hf'", ".. 'hs'"})
      EXPECT_EQ(body.find(derived), std::string::npos) << entry.name << " builds a key name: " << derived;
    // Any publish goes to wake_prefix, built from KEYS[2].
    if (body.find("PUBLISH") != std::string::npos) {
      EXPECT_NE(body.find("wake_prefix .. sid"), std::string::npos) << entry.name;
      EXPECT_NE(body.find("string.sub(KEYS[2], 1, -2) .. 'wake:'"), std::string::npos) << entry.name;
    }
  }
}

// On a cluster the hand-over scripts publish with SPUBLISH (counted on the
// channel's shard), everything else unchanged.
TEST(Slots, ShardedScriptVariantsUseSpublish) {
  namespace s = lockon::detail::scripts;
  using Getter = const lockon::detail::Script& (*)(bool);
  for (const Getter pair : std::vector<Getter>{&s::wait_attempt, &s::release, &s::cancel_wait}) {
    const std::string& plain = (*pair)(false).body();
    const std::string& sharded = (*pair)(true).body();
    EXPECT_NE(plain.find("redis.pcall('PUBLISH'"), std::string::npos);
    EXPECT_EQ(sharded.find("redis.pcall('PUBLISH'"), std::string::npos);
    EXPECT_NE(sharded.find("redis.pcall('SPUBLISH'"), std::string::npos);
    std::string back = sharded;
    back.replace(back.find("'SPUBLISH'"), 10, "'PUBLISH'");
    EXPECT_EQ(back, plain);
    EXPECT_NE((*pair)(false).sha(), (*pair)(true).sha());
    EXPECT_EQ(&(*pair)(true), &(*pair)(true));  // built once
  }
}

TEST(Slots, LockOnKeysSpreadEvenlyOverTheSlots) {
  constexpr int kKeys = 10'000;
  constexpr int kBuckets = 128;  // 128 slots each
  std::vector<int> buckets(kBuckets, 0);
  std::set<int> slots;
  for (int i = 0; i < kKeys; ++i) {
    const std::string key = lockon::lock_on_key("lockon", "billing::charge", i, "EUR");
    const int slot = key_slot(key);
    ++buckets[slot / (lockon::detail::kClusterSlots / kBuckets)];
    slots.insert(slot);
  }
  // Chi-square against uniform, 127 degrees of freedom: the 0.999 quantile
  // is ~181.99. A fixed input set, so this is deterministic.
  const double expected = static_cast<double>(kKeys) / kBuckets;
  double chi2 = 0;
  for (const int count : buckets) chi2 += (count - expected) * (count - expected) / expected;
  EXPECT_LT(chi2, 181.99) << "chi-square " << chi2;
  const auto [lo, hi] = std::minmax_element(buckets.begin(), buckets.end());
  EXPECT_GT(*lo, expected * 0.6);
  EXPECT_LT(*hi, expected * 1.4);
  // 10,000 keys into 16,384 slots: ~7,600 distinct slots expected.
  EXPECT_GT(slots.size(), 7000u);
  RecordProperty("chi_square", std::to_string(chi2));
}

}  // namespace
