// support/fault_proxy_resp.cpp — see fault_proxy_resp.hpp.
#include "support/fault_proxy_resp.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace lockon::test::resp {
namespace {

// A header line "<type><text>\r\n" at `pos`: its text and where the next byte is.
bool read_line(std::string_view data, std::size_t pos, std::string_view& text, std::size_t& next) {
  const std::size_t end = data.find("\r\n", pos);
  if (end == std::string_view::npos) return false;
  text = data.substr(pos, end - pos);
  next = end + 2;
  return true;
}

bool to_integer(std::string_view text, long long& value) {
  if (text.empty()) return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc{} && end == text.data() + text.size();
}

// A bulk payload of `size` bytes plus CRLF at `pos`.
Scan skip_bulk(std::string_view data, std::size_t pos, long long size, std::size_t& next) {
  if (size < 0) return Scan::malformed;
  const auto payload = static_cast<std::size_t>(size);
  if (data.size() < pos + payload + 2) return Scan::incomplete;
  if (data[pos + payload] != '\r' || data[pos + payload + 1] != '\n') return Scan::malformed;
  next = pos + payload + 2;
  return Scan::complete;
}

}  // namespace

Scan scan_reply(std::string_view data, std::size_t& length) {
  // Elements still expected by each open aggregate, innermost last.
  std::vector<long long> open;
  std::size_t pos = 0;
  for (;;) {
    if (pos >= data.size()) return Scan::incomplete;
    std::string_view line;
    std::size_t next = 0;
    if (!read_line(data, pos, line, next)) return Scan::incomplete;
    const char type = line.front();
    line.remove_prefix(1);
    long long count = 0;
    switch (type) {
      case '+': case '-': case ':': case '_': case ',': case '#': case '(':
        break;
      case '$': case '!': case '=':  // bulk string, bulk error, verbatim string
        if (!to_integer(line, count)) return Scan::malformed;
        if (count >= 0) {
          const Scan bulk = skip_bulk(data, next, count, next);
          if (bulk != Scan::complete) return bulk;
        }
        break;
      case '*': case '~': case '>': case '%': case '|':  // array, set, push, map, attribute
        if (!to_integer(line, count)) return Scan::malformed;
        if (type == '%') count *= 2;
        if (type == '|') count = count * 2 + 1;  // the attribute map, then the value it annotates
        if (count > 0) {
          open.push_back(count);
          pos = next;
          continue;
        }
        break;
      default:
        return Scan::malformed;
    }
    pos = next;
    // One value is complete: close every aggregate it completes.
    while (!open.empty() && --open.back() == 0) open.pop_back();
    if (open.empty()) {
      length = pos;
      return Scan::complete;
    }
  }
}

Scan scan_command(std::string_view data, Command& command) {
  command.words.clear();
  command.name.clear();
  if (data.empty()) return Scan::incomplete;
  std::size_t pos = 0;
  if (data.front() == '*') {
    std::string_view line;
    if (!read_line(data, 1, line, pos)) return Scan::incomplete;
    long long count = 0;
    if (!to_integer(line, count)) return Scan::malformed;
    for (long long i = 0; i < count; ++i) {
      if (pos >= data.size()) return Scan::incomplete;
      if (data[pos] != '$') return Scan::malformed;
      long long size = 0;
      std::size_t payload = 0;
      if (!read_line(data, pos + 1, line, payload)) return Scan::incomplete;
      if (!to_integer(line, size)) return Scan::malformed;
      const Scan bulk = skip_bulk(data, payload, size, pos);
      if (bulk != Scan::complete) return bulk;
      command.words.push_back(data.substr(payload, static_cast<std::size_t>(size)));
    }
  } else {
    // Inline: one line of space-separated words (Redis's quoting is not needed here).
    const std::size_t end = data.find('\n');
    if (end == std::string_view::npos) return Scan::incomplete;
    pos = end + 1;
    std::string_view line = data.substr(0, end);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::size_t at = 0;
    while (at < line.size()) {
      const std::size_t start = line.find_first_not_of(" \t", at);
      if (start == std::string_view::npos) break;
      const std::size_t stop = std::min(line.find_first_of(" \t", start), line.size());
      command.words.push_back(line.substr(start, stop - start));
      at = stop;
    }
  }
  command.length = pos;
  if (!command.words.empty()) {
    for (const char c : command.words.front()) {
      command.name += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  return Scan::complete;
}

}  // namespace lockon::test::resp
