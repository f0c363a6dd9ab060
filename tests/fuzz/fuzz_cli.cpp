// Fuzz target: the `lockon` tool's option and duration parsing — the pure
// parts of tools/ (key_command.cpp, run_settings.cpp, report.cpp) and
// lockon::parse_duration, which every DURATION option goes through.
//
// Properties:
//   - parse_duration: throws only ConfigError; a result is within
//     0..1e15 ms; plain integer spellings ("250", "10s", "2m", "1h") give
//     exactly N * unit;
//   - --arg TYPE:VALUE (add_typed_arg): throws only ConfigError; str:X is X
//     verbatim; int:N and uint:N agree where both accept N; a rejected spec
//     leaves nothing behind; derive_key is deterministic;
//   - `run` options (validate_run_options): only ConfigError; a positive TTL;
//     the durations are parse_duration's;
//   - the stderr Redactor never lets a password or more than the allowed
//     prefix of a token through.
//
// The first input byte picks the function, the rest drives its input.
#include <fuzzer/FuzzedDataProvider.h>

#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.hpp"
#include "key_command.hpp"
#include "lockon/encoding.hpp"
#include "lockon/errors.hpp"
#include "lockon/options.hpp"
#include "report.hpp"
#include "run_settings.hpp"

namespace {

using lockon::fuzz::check;
using lockon::fuzz::fail;

// Runs `body`; true if it returned, false after a ConfigError; fails on anything else.
template <class Body>
bool config_only(const char* what, Body&& body) {
  try {
    body();
    return true;
  } catch (const lockon::ConfigError&) {
    return false;
  } catch (const std::exception& e) {
    fail(what, e.what());
  } catch (...) {
    fail(what, "a non-std exception");
  }
}

// N followed by a known unit, N all digits: the exact result, or nullopt.
std::optional<long long> integral_duration(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 12) return std::nullopt;
  long long n = 0;
  std::from_chars(text.data(), text.data() + digits, n);
  const std::string_view unit = text.substr(digits);
  if (unit.empty() || unit == "ms") return n;
  if (unit == "s") return n * 1000;
  if (unit == "m" || unit == "min") return n * 60'000;
  if (unit == "h") return n * 3'600'000;
  return std::nullopt;
}

void fuzz_duration(std::string_view text) {
  std::chrono::milliseconds parsed{};
  const bool ok = config_only("parse_duration threw something other than ConfigError",
                              [&] { parsed = lockon::parse_duration(text); });
  const auto exact = integral_duration(text);
  if (ok) {
    check(parsed.count() >= 0 && parsed.count() <= 1'000'000'000'000'000, "duration out of range", text);
    if (exact) check(parsed.count() == *exact, "integral duration parsed inexactly", text);
  } else if (exact) {
    check(*exact > 1'000'000'000'000'000, "a valid integral duration was rejected", text);
  }
}

std::optional<std::string> typed_arg(std::string_view spec) {
  lockon::Encoder encoder;
  const bool ok = config_only("add_typed_arg threw something other than ConfigError",
                              [&] { lockon::cli::add_typed_arg(encoder, spec); });
  if (!ok) return std::nullopt;
  check(!encoder.bytes().empty(), "add_typed_arg accepted a spec and wrote nothing", spec);
  return encoder.take();
}

void fuzz_typed_arg(FuzzedDataProvider& data) {
  static constexpr const char* kTypes[] = {"int:", "uint:", "str:", "bool:", "float:"};
  const std::string value = data.ConsumeRandomLengthString(40);
  const std::string spec = data.ConsumeBool() ? kTypes[data.ConsumeIntegralInRange<int>(0, 4)] + value : value;
  const auto bytes = typed_arg(spec);
  if (spec.starts_with("str:")) {
    lockon::Encoder expected;
    expected.add_string(std::string_view(spec).substr(4));
    check(bytes && *bytes == expected.bytes(), "str:X does not encode X verbatim", spec);
  }
  if (spec.starts_with("int:") || spec.starts_with("uint:")) {
    // The same number as the other type: equal bytes wherever both accept it.
    const std::string_view number = std::string_view(spec).substr(spec.find(':') + 1);
    const auto other = typed_arg((spec.starts_with("int:") ? "uint:" : "int:") + std::string(number));
    if (bytes && other) check(*bytes == *other, "int:N and uint:N encode differently", spec);
    if (bytes) check((*bytes)[0] == 'i', "an integer argument is not encoded as an integer", spec);
  }
  if (spec.starts_with("bool:") && bytes) {
    // The text after the prefix (the raw input may itself start with "bool:").
    const std::string_view text = std::string_view(spec).substr(5);
    check(text == "true" || text == "false" || text == "1" || text == "0", "odd bool accepted", spec);
  }
}

void fuzz_key(FuzzedDataProvider& data) {
  lockon::cli::KeyOptions options;
  options.name = data.ConsumeRandomLengthString(16);
  options.no_function = data.ConsumeBool();
  if (data.ConsumeBool()) options.prefix = data.ConsumeRandomLengthString(8);
  const int count = data.ConsumeIntegralInRange<int>(0, 4);
  for (int i = 0; i < count; ++i) options.args.push_back(data.ConsumeRandomLengthString(24));
  std::string key;
  const bool ok = config_only("derive_key threw something other than ConfigError",
                              [&] { key = lockon::cli::derive_key(options); });
  if (!ok) return;
  check(options.no_function == options.name.empty(), "derive_key accepted NAME with --no-function, or neither");
  check(key == lockon::cli::derive_key(options), "derive_key is not deterministic");
  check(key.starts_with(options.prefix + ":"), "key does not start with the prefix", key);
}

void fuzz_run_options(FuzzedDataProvider& data) {
  lockon::cli::RunOptions options;
  options.ttl = data.ConsumeRandomLengthString(12);
  options.wait = data.ConsumeBool() ? data.ConsumeRandomLengthString(12) : std::string();
  options.kill_after = data.ConsumeRandomLengthString(12);
  options.name = data.ConsumeRandomLengthString(8);
  if (data.ConsumeBool()) options.command.push_back(data.ConsumeRandomLengthString(8));
  options.fence_env = data.ConsumeRandomLengthString(12);
  if (data.ConsumeBool()) options.names = {options.name, data.ConsumeRandomLengthString(8)};  // NAME1 NAME2 -- ...
  lockon::cli::RunSettings settings;
  const bool ok = config_only("validate_run_options threw something other than ConfigError",
                              [&] { settings = lockon::cli::validate_run_options(options); });
  if (!ok) return;
  check(settings.ttl >= lockon::cli::kMinimumTtl, "TTL below the minimum accepted");
  check(settings.ttl == lockon::cli::parse_cli_duration(options.ttl, "--ttl"), "--ttl differs from parse_cli_duration");
  check(settings.kill_after == lockon::cli::parse_cli_duration(options.kill_after, "--kill-after"),
        "--kill-after differs");
  check(settings.wait.has_value() == !options.wait.empty(), "--wait presence changed");
  check(!options.name.empty() && !options.command.empty(), "run accepted without NAME or COMMAND");
  for (const std::string& name : options.names) check(!name.empty(), "run accepted an empty NAME among several");
  check(options.fence_env.empty() || lockon::cli::valid_env_name(options.fence_env), "bad --fence-env accepted");
}

void fuzz_redactor(FuzzedDataProvider& data) {
  const std::string password = data.ConsumeRandomLengthString(12);
  const std::string token = data.ConsumeRandomLengthString(40);
  const std::string text = data.ConsumeRandomLengthString(200);
  const std::string shown = lockon::cli::token_prefix(token);
  check(shown.size() <= 8 && shown.size() <= token.size() / 2, "token_prefix shows too much");
  // The token's first bytes, a control or non-ASCII byte shown as '?'
  // (what a key holds reaches a terminal: session 21).
  for (std::size_t i = 0; i < shown.size(); ++i) {
    const auto byte = static_cast<unsigned char>(token[i]);
    const bool printable = byte >= 0x20 && byte <= 0x7e;
    check(shown[i] == (printable ? token[i] : '?'), "token_prefix is not the token's prefix");
  }

  lockon::cli::Redactor with_password;
  with_password.add_password(password);
  const std::string out = with_password.apply(text);
  // "***" itself, or a password made of '*', may of course remain.
  if (!password.empty() && password.find('*') == std::string::npos) {
    check(out.find(password) == std::string::npos, "password left in redacted text");
  }

  lockon::cli::Redactor with_token;
  with_token.add_token(token);
  const std::string out_token = with_token.apply(text);
  if (!token.empty()) check(out_token.find(token) == std::string::npos, "token left in redacted text");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  if (size == 0) return 0;
  FuzzedDataProvider data(bytes + 1, size - 1);
  switch (bytes[0] % 5) {
    case 0: fuzz_duration(data.ConsumeRemainingBytesAsString()); break;
    case 1: fuzz_typed_arg(data); break;
    case 2: fuzz_key(data); break;
    case 3: fuzz_run_options(data); break;
    default: fuzz_redactor(data); break;
  }
  return 0;
}
