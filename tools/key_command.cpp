#include "key_command.hpp"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <system_error>

#include "exit_codes.hpp"
#include "lockon/errors.hpp"
#include "lockon/key.hpp"

namespace lockon::cli {
namespace {

template <class T>
T parse_number(std::string_view text, std::string_view spec, const char* what) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error == std::errc::invalid_argument || end != text.data() + text.size())
    throw ConfigError("--arg '" + std::string(spec) + "': not " + what);
  if (error == std::errc::result_out_of_range)
    throw ConfigError("--arg '" + std::string(spec) + "': out of range for " + what);
  return value;
}

}  // namespace

void add_typed_arg(Encoder& encoder, std::string_view spec) {
  const auto colon = spec.find(':');
  if (colon == std::string_view::npos)
    throw ConfigError("--arg '" + std::string(spec) + "': expected TYPE:VALUE with TYPE int, uint, str, bool or float");
  const std::string_view type = spec.substr(0, colon);
  const std::string_view value = spec.substr(colon + 1);
  if (type == "int") {
    encoder.add_int(parse_number<std::int64_t>(value, spec, "a signed 64-bit integer"));
  } else if (type == "uint") {
    if (!value.empty() && value.front() == '-')
      throw ConfigError("--arg '" + std::string(spec) + "': not an unsigned 64-bit integer");
    encoder.add_uint(parse_number<std::uint64_t>(value, spec, "an unsigned 64-bit integer"));
  } else if (type == "str") {
    encoder.add_string(value);
  } else if (type == "bool") {
    if (value == "true" || value == "1") {
      encoder.add_bool(true);
    } else if (value == "false" || value == "0") {
      encoder.add_bool(false);
    } else {
      throw ConfigError("--arg '" + std::string(spec) + "': a bool is true, false, 1 or 0");
    }
  } else if (type == "float") {
    const double number = parse_number<double>(value, spec, "a floating-point number");
    encoder.add_double(number);  // ConfigError for NaN
  } else {
    throw ConfigError("--arg '" + std::string(spec) + "': unknown TYPE '" + std::string(type) +
                      "' (int, uint, str, bool or float)");
  }
}

std::string derive_key(const KeyOptions& options) {
  if (options.no_function && !options.name.empty())
    throw ConfigError("NAME and --no-function exclude each other (--no-function drops the function identity)");
  if (!options.no_function && options.name.empty()) throw ConfigError("NAME is required unless --no-function is given");
  Encoder encoder;
  encoder.begin_tuple(options.args.size());
  for (const auto& spec : options.args) add_typed_arg(encoder, spec);
  const std::string digest = options.no_function ? std::string() : function_digest(options.name);
  return make_lock_key(options.prefix, digest, encoder.bytes());
}

int key_command(const KeyOptions& options) {
  const std::string key = derive_key(options);
  std::cout << key << '\n' << std::flush;
  return std::cout ? exit_code::ok : exit_code::internal;
}

}  // namespace lockon::cli
