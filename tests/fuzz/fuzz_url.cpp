// Fuzz target: ConnectionOptions::from_url (src/client/options.cpp).
//
// Properties:
//   - never crashes, and throws nothing but lockon::ConfigError;
//   - a parsed result is sane (port 1..65535, db >= 0, timeouts >= 0, either
//     a host or a unix path);
//   - differential: for a URL built around a known password, the password
//     (as written, and percent-decoded) never appears in an exception message
//     nor in endpoint(), and a successful parse yields exactly that password
//     and user.
//
// The first input byte picks raw mode (the rest is the URL) or built mode
// (the rest drives the URL's parts).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "lockon/errors.hpp"
#include "lockon/options.hpp"

namespace {

using lockon::fuzz::check;
using lockon::fuzz::fail;

void check_sane(const lockon::ConnectionOptions& o) {
  check(o.unix_path.empty() ? (o.port >= 1 && o.port <= 65535 && !o.host.empty()) : o.unix_path.front() == '/',
        "parsed options without a valid host:port or absolute unix path");
  check(o.db >= 0, "negative db");
  check(o.connect_timeout.count() >= 0 && o.socket_timeout.count() >= 0, "negative timeout");
  check(o.user.empty() || !o.password.empty(), "user name accepted without a password");
}

// Parses `url`: the options, or the ConfigError message. Anything else thrown fails.
bool parse(std::string_view url, lockon::ConnectionOptions& out, std::string& message) {
  try {
    out = lockon::ConnectionOptions::from_url(url);
    return true;
  } catch (const lockon::ConfigError& e) {
    message = e.what();
    return false;
  } catch (const std::exception& e) {
    fail("from_url threw something other than ConfigError", e.what());
  } catch (...) {
    fail("from_url threw a non-std exception");
  }
}

// %XX for `c`.
void append_escaped(std::string& out, unsigned char c) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  out += '%';
  out += kHex[c >> 4];
  out += kHex[c & 0xF];
}

// `text` as it would be written into a URL's userinfo: bytes in `must` always
// escaped, others escaped when the fuzzer says so.
std::string encode_userinfo(std::string_view text, std::string_view must, FuzzedDataProvider& data) {
  std::string out;
  for (const char c : text) {
    if (must.find(c) != std::string_view::npos || data.ConsumeBool()) {
      append_escaped(out, static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out;
}

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

void built_mode(FuzzedDataProvider& data) {
  static constexpr const char* kSchemes[] = {"redis", "unix", "rediss", "", "REDIS", "redis+x"};
  std::string scheme = data.ConsumeBool() ? kSchemes[data.ConsumeIntegralInRange<std::size_t>(0, 5)]
                                          : data.ConsumeRandomLengthString(12);
  const bool with_user = data.ConsumeBool();
  const std::string user = with_user ? data.ConsumeRandomLengthString(16) : std::string();
  std::string password = data.ConsumeRandomLengthString(24);
  const std::string rest = data.ConsumeRandomLengthString(40);    // host[:port][/db]...
  const bool with_query = data.ConsumeBool();
  const std::string query = with_query ? data.ConsumeRandomLengthString(40) : std::string();

  // The password gets a marker: a byte >= 0x80 that no other part of the URL
  // and no constant message text contains. An occurrence of the password in
  // a message then cannot be assembled from echoes of other parts around
  // constant text; it can only be a leak.
  const std::string others = scheme + user + rest + query;
  const auto unused = [&](char c) { return others.find(c) == std::string::npos; };
  bool marked = false;
  for (const char c : password) marked |= static_cast<unsigned char>(c) >= 0x80 && unused(c);
  for (unsigned byte = 0x80; !marked && byte <= 0xFF; ++byte) {
    if (unused(static_cast<char>(byte))) {
      password.insert(password.size() / 2, 1, static_cast<char>(byte));
      marked = true;
    }
  }
  if (!marked) return;  // every high byte is used elsewhere: nothing to learn

  // '%' always escaped (else it would decode); ':' splits user from password.
  const std::string user_written = encode_userinfo(user, "%:", data);
  const std::string password_written = encode_userinfo(password, with_user ? "%" : "%:", data);
  std::string url = scheme + "://";
  if (with_user) url += user_written + ":";
  url += password_written + "@" + rest;
  if (with_query) url += "?" + query;

  lockon::ConnectionOptions options;
  std::string message;
  const bool parsed = parse(url, options, message);
  if (parsed) check_sane(options);

  for (const std::string_view secret : {std::string_view(password), std::string_view(password_written)}) {
    bool secret_marked = false;  // password_written may have escaped the marker
    for (const char c : secret) secret_marked |= static_cast<unsigned char>(c) >= 0x80 && unused(c);
    if (!secret_marked) continue;
    if (!parsed) check(!contains(message, secret), "password in a ConfigError message", message);
    // A unix:// URL has no userinfo: there the "password" is part of the
    // socket path (the fuzzed scheme text may itself spell "unix://...").
    if (parsed && options.unix_path.empty()) {
      check(!contains(options.endpoint(), secret), "password in endpoint()", options.endpoint());
    }
  }
  // With no other '@' the userinfo is exactly ours.
  if (parsed && scheme == "redis" && !contains(rest, "@") && !contains(query, "@")) {
    check(options.password == password, "parsed password differs from the one written");
    check(options.user == user, "parsed user differs from the one written");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  if (size == 0) return 0;
  if ((bytes[0] & 1) == 0) {
    lockon::ConnectionOptions options;
    std::string message;
    if (parse(std::string_view(reinterpret_cast<const char*>(bytes + 1), size - 1), options, message)) {
      check_sane(options);
    }
    return 0;
  }
  FuzzedDataProvider data(bytes + 1, size - 1);
  built_mode(data);
  return 0;
}
