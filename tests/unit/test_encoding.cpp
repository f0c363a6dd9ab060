// The canonical argument encoding (lockon/encoding.hpp) and the key layout
// (lockon/key.hpp): injectivity over tricky inputs, value-based
// equivalences, rejections, and golden bytes/keys that pin the format.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <limits>
#include <list>
#include <map>
#include <memory_resource>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "lockon/encoding.hpp"
#include "lockon/key.hpp"

namespace {

struct BankAccount {
  std::string bank;
  long number = 0;
};

// A user type that is also a range: its ArgEncoder must win over "list".
struct Tags : std::vector<std::string> {
  using std::vector<std::string>::vector;
};

struct NoEncoder {};

enum class Color : std::uint8_t { red = 42 };
enum Level : int { kLow = -3 };

}  // namespace

template <>
struct lockon::ArgEncoder<BankAccount> {
  static void encode(lockon::Encoder& enc, const BankAccount& a) {
    enc.add(a.bank);
    enc.add(a.number);
  }
};

template <>
struct lockon::ArgEncoder<Tags> {
  static void encode(lockon::Encoder& enc, const Tags& tags) {
    for (const auto& t : tags) enc.add(t);
  }
};

namespace {

using namespace std::literals;
using lockon::encode_args;
using lockon::Encodable;

// What can and cannot be encoded is decided at compile time.
static_assert(Encodable<int> && Encodable<const long&> && Encodable<std::uint64_t> && Encodable<std::int8_t>);
static_assert(Encodable<std::string> && Encodable<std::string_view> && Encodable<const char*> &&
              Encodable<char[4]> && Encodable<std::pmr::string>);
static_assert(Encodable<bool> && Encodable<float> && Encodable<double> && Encodable<Color>);
static_assert(Encodable<std::vector<std::map<std::string, std::optional<std::tuple<int, bool>>>>>);
static_assert(Encodable<std::chrono::seconds> && Encodable<std::chrono::nanoseconds>);
static_assert(Encodable<BankAccount> && Encodable<std::vector<BankAccount>> && Encodable<Tags>);
static_assert(Encodable<std::variant<std::monostate, int, std::string>> && Encodable<std::nullptr_t>);
static_assert(Encodable<std::set<int>> && Encodable<std::span<const int>> && Encodable<std::array<int, 2>>);
// Plain char is ambiguous (text or number?); signed/unsigned char are numbers.
static_assert(!Encodable<char> && !Encodable<wchar_t> && !Encodable<char8_t> && !Encodable<char32_t>);
static_assert(!Encodable<std::vector<char>> && !Encodable<std::wstring> && !Encodable<std::u8string>);
static_assert(!Encodable<long double> && !Encodable<int*> && !Encodable<void*> && !Encodable<NoEncoder>);
static_assert(!Encodable<std::unordered_map<int, int>> && !Encodable<std::unordered_set<int>>);
static_assert(!Encodable<std::filesystem::path>);
static_assert(!Encodable<std::chrono::duration<double>> && !Encodable<std::chrono::duration<long, std::pico>>);
static_assert(!Encodable<std::optional<NoEncoder>> && !Encodable<std::tuple<int, char>> &&
              !Encodable<std::map<int, NoEncoder>>);

struct Case {
  std::string name;
  std::string bytes;
};

std::vector<Case> distinct_cases() {
  constexpr auto i64_min = std::numeric_limits<std::int64_t>::min();
  constexpr auto i64_max = std::numeric_limits<std::int64_t>::max();
  constexpr auto u64_max = std::numeric_limits<std::uint64_t>::max();
  constexpr double inf = std::numeric_limits<double>::infinity();
  using IntVec = std::vector<int>;
  return {
      // The blog's str()-join collisions.
      {"('a:b')", encode_args("a:b"s)},
      {"('a','b')", encode_args("a"s, "b"s)},
      {"('1:2')", encode_args("1:2"s)},
      {"(1,2)", encode_args(1, 2)},
      {"(1)", encode_args(1)},
      {"('1')", encode_args("1"s)},
      {"('None')", encode_args("None"s)},
      {"(nullopt)", encode_args(std::optional<int>{})},
      {"('True')", encode_args("True"s)},
      {"(true)", encode_args(true)},
      {"('[1, 2]')", encode_args("[1, 2]"s)},
      {"([1,2])", encode_args(IntVec{1, 2})},
      // Empty strings and position.
      {"('','x')", encode_args(""s, "x"s)},
      {"('x','')", encode_args("x"s, ""s)},
      {"('x')", encode_args("x"s)},
      {"('')", encode_args(""s)},
      {"('','')", encode_args(""s, ""s)},
      {"()", encode_args()},
      // Empty things of different kinds.
      {"(())", encode_args(std::tuple<>{})},
      {"([])", encode_args(IntVec{})},
      {"({})", encode_args(std::map<int, int>{})},
      {"([''])", encode_args(std::vector<std::string>{""})},
      {"([nullopt])", encode_args(std::vector<std::optional<int>>{std::nullopt})},
      {"(nullptr)", encode_args(nullptr)},
      {"(optional(nullopt))", encode_args(std::optional<std::optional<int>>{std::optional<int>{}})},
      {"(optional(0))", encode_args(std::optional<int>{0})},
      // Numbers, booleans and their look-alikes.
      {"(0)", encode_args(0)},
      {"(false)", encode_args(false)},
      {"(0.0)", encode_args(0.0)},
      {"(1.0)", encode_args(1.0)},
      {"(0.1)", encode_args(0.1)},
      {"(0.1f)", encode_args(0.1f)},
      {"(inf)", encode_args(inf)},
      {"(-inf)", encode_args(-inf)},
      {"(-1)", encode_args(-1)},
      {"(INT64_MIN)", encode_args(i64_min)},
      {"(INT64_MAX)", encode_args(i64_max)},
      {"(UINT64_MAX)", encode_args(u64_max)},
      {"(2^63 unsigned)", encode_args(std::uint64_t{1} << 63)},
      {"(1ns)", encode_args(1ns)},
      {"(-1ns)", encode_args(-1ns)},
      // Separators and NULs inside strings.
      {"('a\\0b')", encode_args("a\0b"s)},
      {"('a|b')", encode_args("a|b"s)},
      {"('a','|b')", encode_args("a"s, "|b"s)},
      {"('a:','b')", encode_args("a:"s, "b"s)},
      // Nesting.
      {"([[1],[2]])", encode_args(std::vector<IntVec>{{1}, {2}})},
      {"([[1,2]])", encode_args(std::vector<IntVec>{{1, 2}})},
      {"([[1,2],[]])", encode_args(std::vector<IntVec>{{1, 2}, {}})},
      {"((1,2))", encode_args(std::tuple{1, 2})},
      {"(((1,2)))", encode_args(std::make_tuple(std::make_tuple(1, 2)))},  // not CTAD: tuple{tuple} copies
      {"({1:2})", encode_args(std::map<int, int>{{1, 2}})},
      {"([(1,2)])", encode_args(std::vector<std::pair<int, int>>{{1, 2}})},
      {"({'a':'b'})", encode_args(std::map<std::string, std::string>{{"a", "b"}})},
      {"(variant#0 1)", encode_args(std::variant<int, int>{std::in_place_index<0>, 1})},
      {"(variant#1 1)", encode_args(std::variant<int, int>{std::in_place_index<1>, 1})},
      // User types are wrapped: never equal to the same fields unwrapped.
      {"(Account{'a',1})", encode_args(BankAccount{"a", 1})},
      {"(('a',1))", encode_args(std::tuple{"a"s, 1})},
      {"(Tags{'a'})", encode_args(Tags{"a"})},
      {"(['a'])", encode_args(std::vector<std::string>{"a"})},
  };
}

TEST(Encoding, TrickyArgumentListsArePairwiseDistinct) {
  const std::vector<Case> cases = distinct_cases();
  ASSERT_GE(cases.size(), 40u);
  const std::string fn = lockon::function_digest("tests::distinct");
  for (std::size_t i = 0; i < cases.size(); ++i) {
    for (std::size_t j = i + 1; j < cases.size(); ++j) {
      EXPECT_NE(cases[i].bytes, cases[j].bytes) << cases[i].name << " vs " << cases[j].name;
      EXPECT_NE(lockon::make_lock_key("lockon", fn, cases[i].bytes),
                lockon::make_lock_key("lockon", fn, cases[j].bytes))
          << cases[i].name << " vs " << cases[j].name;
      EXPECT_NE(lockon::make_lock_key("lockon", "", cases[i].bytes),
                lockon::make_lock_key("lockon", "", cases[j].bytes))
          << cases[i].name << " vs " << cases[j].name;
    }
  }
}

TEST(Encoding, IntegersEncodeByValueWhateverTheirType) {
  const std::string expected = encode_args(42);
  EXPECT_EQ(encode_args(42LL), expected);
  EXPECT_EQ(encode_args(42u), expected);
  EXPECT_EQ(encode_args(std::uint8_t{42}), expected);
  EXPECT_EQ(encode_args(std::int8_t{42}), expected);
  EXPECT_EQ(encode_args(short{42}), expected);
  EXPECT_EQ(encode_args(std::uint64_t{42}), expected);
  EXPECT_EQ(encode_args(Color::red), expected);  // enums: by underlying value
  EXPECT_EQ(encode_args(kLow), encode_args(-3L));
  EXPECT_EQ(encode_args(std::int64_t{-7}), encode_args(std::int8_t{-7}));
  EXPECT_NE(encode_args(-7), encode_args(7));
}

TEST(Encoding, AllStringTypesEncodeAlike) {
  const std::string expected = encode_args("abc"s);
  char buffer[8] = "abc";  // trailing NULs are not part of the value
  char* mutable_pointer = buffer;
  const char* pointer = "abc";
  const std::pmr::string pmr = "abc";
  EXPECT_EQ(encode_args("abc"), expected);
  EXPECT_EQ(encode_args("abc"sv), expected);
  EXPECT_EQ(encode_args(pointer), expected);
  EXPECT_EQ(encode_args(mutable_pointer), expected);
  EXPECT_EQ(encode_args(buffer), expected);
  EXPECT_EQ(encode_args(pmr), expected);
  // Embedded NULs survive in sized strings.
  EXPECT_NE(encode_args("a\0b"sv), encode_args("a"sv));
}

TEST(Encoding, FloatingPointEncodesByValue) {
  EXPECT_EQ(encode_args(0.5f), encode_args(0.5));
  EXPECT_EQ(encode_args(-0.0), encode_args(0.0));
  EXPECT_EQ(encode_args(-0.0f), encode_args(0.0));
  EXPECT_EQ(encode_args(std::numeric_limits<float>::infinity()),
            encode_args(std::numeric_limits<double>::infinity()));
  EXPECT_NE(encode_args(1.0), encode_args(1));
}

TEST(Encoding, DurationsEncodeInNanoseconds) {
  const std::string one_second = encode_args(1s);
  EXPECT_EQ(encode_args(1000ms), one_second);
  EXPECT_EQ(encode_args(1'000'000us), one_second);
  EXPECT_EQ(encode_args(1'000'000'000ns), one_second);
  EXPECT_EQ(encode_args(std::chrono::duration<std::uint32_t>{1}), one_second);
  EXPECT_EQ(encode_args(1min), encode_args(60s));
  EXPECT_EQ(encode_args(-2h), encode_args(-7200s));
  EXPECT_EQ(encode_args(0s), encode_args(-0ms));
  lockon::Encoder enc;
  enc.add_duration(1s);
  EXPECT_EQ(enc.bytes(), one_second.substr(9));  // the argument without the tuple header
  // Out of range: more than 2^64 - 1 ns (about 584 years).
  EXPECT_THROW(encode_args(std::chrono::hours(6'000'000)), lockon::ConfigError);
  EXPECT_THROW(encode_args(std::chrono::hours(-6'000'000)), lockon::ConfigError);
  EXPECT_NO_THROW(encode_args(std::chrono::nanoseconds::min()));
}

TEST(Encoding, ContainersEncodeByContent) {
  const std::string expected = encode_args(std::vector<int>{1, 2});
  const std::array<int, 2> array{1, 2};
  EXPECT_EQ(encode_args(array), expected);
  EXPECT_EQ(encode_args(std::span<const int>(array)), expected);
  EXPECT_EQ(encode_args(std::set<int>{2, 1}), expected);
  EXPECT_EQ(encode_args(std::list<long>{1, 2}), expected);
  EXPECT_EQ(encode_args(std::deque<unsigned>{1, 2}), expected);
  EXPECT_EQ(encode_args(std::vector<bool>{true, false}), encode_args(std::array<bool, 2>{true, false}));
  EXPECT_EQ(encode_args(std::pair{1, "x"s}), encode_args(std::tuple{1, "x"}));
  EXPECT_EQ(encode_args(std::map<int, int>{{1, 2}}), encode_args(std::multimap<int, int>{{1, 2}}));
  EXPECT_EQ(encode_args(nullptr), encode_args(std::monostate{}));
  EXPECT_EQ(encode_args(std::optional<long>{5}), encode_args(std::optional<int>{5}));
}

TEST(Encoding, RuntimeMethodsReproduceTypedEncoding) {
  // What the `lockon key NAME --arg int:42 --arg str:x ...` command does.
  lockon::Encoder enc;
  enc.begin_tuple(5);
  enc.add_int(42);
  enc.add_string("x");
  enc.add_uint(std::numeric_limits<std::uint64_t>::max());
  enc.add_bool(true);
  enc.add_double(-0.0);
  EXPECT_EQ(enc.take(), encode_args(42, "x", std::numeric_limits<std::uint64_t>::max(), true, 0.0));
  EXPECT_TRUE(enc.bytes().empty());
  enc.begin_list(2);
  enc.begin_optional();
  enc.add_int(1);
  enc.add_nullopt();
  EXPECT_EQ(enc.bytes(), encode_args(std::vector<std::optional<int>>{1, std::nullopt}).substr(9));
}

TEST(Encoding, RejectsWhatCannotNameALock) {
  EXPECT_THROW(encode_args(std::numeric_limits<double>::quiet_NaN()), lockon::ConfigError);
  EXPECT_THROW(encode_args(std::numeric_limits<float>::quiet_NaN()), lockon::ConfigError);
  EXPECT_THROW(encode_args(std::vector<double>{1.0, std::numeric_limits<double>::quiet_NaN()}), lockon::ConfigError);
  lockon::Encoder enc;
  EXPECT_THROW(enc.add_double(-std::numeric_limits<double>::quiet_NaN()), lockon::ConfigError);
  const char* null_string = nullptr;
  EXPECT_THROW(encode_args(null_string), lockon::ConfigError);
}

// The bytes themselves, so other implementations (the CLI, other languages)
// can be checked against this one.
TEST(Encoding, GoldenBytes) {
  EXPECT_EQ(encode_args(42, "x"),
            "t\0\0\0\0\0\0\0\x02"
            "i+\0\0\0\0\0\0\0\x2a"
            "s\0\0\0\0\0\0\0\x01x"sv);
  EXPECT_EQ(encode_args(), "t\0\0\0\0\0\0\0\0"sv);
  EXPECT_EQ(encode_args(-1, true, 1.0),
            "t\0\0\0\0\0\0\0\x03"
            "i-\0\0\0\0\0\0\0\x01"
            "b\x01"
            "f\x3f\xf0\0\0\0\0\0\0"sv);
  EXPECT_EQ(encode_args(std::optional<int>{}, std::vector<int>{}, nullptr, 1ns),
            "t\0\0\0\0\0\0\0\x04"
            "o\0"
            "l\0\0\0\0\0\0\0\0"
            "z"
            "d+\0\0\0\0\0\0\0\x01"sv);
  EXPECT_EQ(encode_args(BankAccount{"", 0}),
            "t\0\0\0\0\0\0\0\x01"
            "x\0\0\0\0\0\0\0\x13"
            "s\0\0\0\0\0\0\0\0"
            "i+\0\0\0\0\0\0\0\0"sv);
}

// Pinned keys: if any of these change, deployed processes stop excluding
// each other. Never update them to make a test pass. They were cross-checked
// against an independent Python implementation of the documented format.
TEST(Key, GoldenKeys) {
  EXPECT_EQ(lockon::function_digest("transfer"), "84a0f3455dcca894ace136be62efa292");
  EXPECT_EQ(lockon::make_lock_key("lockon", lockon::function_digest("transfer"), encode_args(42, "x")),
            "lockon:84a0f3455dcca894ace136be62efa292:lock|9c7971fd1ce3caadcae959b850c8d9a5");
  EXPECT_EQ(lockon::make_lock_key("lockon", "", encode_args("acct-1"s)), "lockon:entity:lock|ab16904ccc637eb2de2b068c35f13eff");
  EXPECT_EQ(lockon::make_lock_key("app", lockon::function_digest("billing::charge"),
                                  encode_args(7, "user-123", "EUR")),
            "app:07f466e853db2ac460ecfea77cf1ef4e:lock|f5826963ae8acc72de582402d6e1f18e");
}

TEST(Key, CompileTimeDigestMatchesRuntime) {
  constexpr std::array<char, 32> digest = lockon::function_digest_ct("transfer");
  EXPECT_EQ(std::string_view(digest.data(), digest.size()), lockon::function_digest("transfer"));
}

TEST(Key, Layout) {
  const std::string digest = lockon::function_digest("f");
  const std::string args = encode_args(1);
  const std::string args_hex = lockon::md5_hex(args);
  EXPECT_EQ(lockon::make_lock_key("p", digest, args), "p:" + digest + ":lock|" + args_hex);
  EXPECT_EQ(lockon::make_lock_key("p", "", args), "p:entity:lock|" + args_hex);
  EXPECT_EQ(lockon::make_lock_key("a:b", digest, args), "a:b:" + digest + ":lock|" + args_hex);
  EXPECT_EQ(lockon::kDefaultKeyPrefix, "lockon");
  EXPECT_NE(lockon::key_layout().find("<prefix>:<md5hex(function identity)>:lock|<md5hex(encoded arguments)>"),
            std::string_view::npos);
}

TEST(Key, RejectsBadInput) {
  const std::string digest = lockon::function_digest("f");
  EXPECT_THROW(lockon::make_lock_key("", digest, ""), lockon::ConfigError);
  EXPECT_THROW(lockon::make_lock_key("p", digest.substr(1), ""), lockon::ConfigError);
  std::string upper = digest;
  for (char& c : upper) c = (c >= 'a' && c <= 'f') ? static_cast<char>(c - 'a' + 'A') : c;
  if (upper != digest) {
    EXPECT_THROW(lockon::make_lock_key("p", upper, ""), lockon::ConfigError);
  }
  EXPECT_THROW(lockon::make_lock_key("p", "entity", ""), lockon::ConfigError);
  EXPECT_THROW(lockon::make_lock_key("p", std::string(32, 'g'), ""), lockon::ConfigError);
}

}  // namespace
