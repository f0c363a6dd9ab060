#include "status_view.hpp"

#include <charconv>
#include <cstdio>

namespace lockon::cli {
namespace {

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const auto at = text.find(sep, start);
    parts.push_back(text.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

bool to_number(std::string_view text, long long& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

}  // namespace

std::optional<HolderRecord> parse_holder_record(std::string_view text) {
  const auto fields = split(text, '|');
  if (fields.size() != 6) return std::nullopt;
  HolderRecord r;
  r.token_prefix = fields[0];
  r.host = fields[1];
  r.label = fields[4];
  if (!to_number(fields[2], r.pid) || !to_number(fields[3], r.process_start_ms) || !to_number(fields[5], r.since_ms))
    return std::nullopt;
  return r;
}

std::string terminal_safe(std::string_view text) {
  std::string shown(text);
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return shown;
}

std::string describe_who(const HolderRecord& record) {
  std::string text = "host=" + terminal_safe(record.host) + " pid=" + std::to_string(record.pid);
  if (!record.label.empty()) text += " label=" + terminal_safe(record.label);
  return text;
}

Waiters read_waiters(const std::vector<std::string>& queue, const std::vector<std::string>& qwho, long long now_ms) {
  Waiters out;
  out.count = queue.size();
  for (const std::string& entry : queue) {
    WaiterView view;
    const auto parts = split(entry, '|');
    if (parts.size() >= 2) {
      for (std::size_t i = 0; i + 1 < qwho.size(); i += 2) {
        if (qwho[i] != parts[1]) continue;
        view.who = parse_holder_record(qwho[i + 1]);
        break;
      }
    }
    if (view.who) {
      view.waiting_ms = now_ms > view.who->since_ms ? now_ms - view.who->since_ms : 0;
      if (view.waiting_ms > out.longest_ms) out.longest_ms = view.waiting_ms;
    }
    out.who.push_back(std::move(view));
  }
  return out;
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (u < 0x20 || u == 0x7f) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", u);
          out += buffer;
        } else {
          out += c;  // UTF-8 bytes pass through
        }
    }
  }
  return out + "\"";
}

std::string json_who(const HolderRecord& record) {
  return "{\"host\":" + json_string(record.host) + ",\"pid\":" + std::to_string(record.pid) +
         ",\"process_start_ms\":" + std::to_string(record.process_start_ms) + ",\"label\":" +
         json_string(record.label) + "}";
}

}  // namespace lockon::cli
