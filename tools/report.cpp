#include "report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "exit_codes.hpp"
#include "lockon/errors.hpp"

namespace lockon::cli {

void Redactor::add_password(std::string password) {
  if (password.empty()) return;
  replacements_.emplace_back(std::move(password), "***");
}

void Redactor::add_token(std::string token) {
  if (token.empty()) return;
  // The token's own first bytes, then three fillers. A replacement never
  // forms the token again: a new occurrence would have to end in the prefix
  // (and so have been an earlier occurrence, already replaced) unless it
  // holds a filler. '.' is the filler unless the token could hold one of
  // three dots: it has "..", or starts or ends with '.' (lockon's own tokens
  // have one '.' inside); else a character the token lacks. The prefix stops
  // at a '?' standing for a control byte (not the token's own byte): token
  // "\x01?" in "\x01\x01?" became "\x01?..." (the fuzzer), and "..b" in
  // "..bb" re-formed with "..." (review).
  std::string shown = token_prefix(token);
  shown.resize(static_cast<std::size_t>(std::mismatch(shown.begin(), shown.end(), token.begin()).first - shown.begin()));
  char filler = '.';
  if (token.find("..") != std::string::npos || token.front() == '.' || token.back() == '.') {
    filler = '!';
    while (filler < '~' && token.find(filler) != std::string::npos) ++filler;
  }
  shown.append(3, filler);
  replacements_.emplace_back(std::move(token), std::move(shown));
}

void Redactor::add_url_credentials(std::string_view text) {
  // Secrets shorter than this would blank ordinary words in messages.
  const auto hide = [this](std::string_view secret) {
    if (secret.size() >= 3) add_password(std::string(secret));
  };
  for (std::size_t from = 0; from < text.size();) {
    // One URL per whitespace-separated word of a Redis scheme (the URL
    // parser refuses spaces, so a password with one is split the same way
    // in its messages: each piece is hidden).
    const auto start = text.find_first_not_of(" \t\n", from);
    if (start == std::string_view::npos) break;
    std::size_t end = text.find_first_of(" \t\n", start);
    if (end == std::string_view::npos) end = text.size();
    from = end;
    if (!looks_like_url(text.substr(start))) continue;
    // The rest of the value may belong to this URL (a password with spaces).
    const auto next_url = [&] {
      for (std::size_t at = end; at < text.size(); ++at)
        if ((at == 0 || text[at - 1] == ' ' || text[at - 1] == '\t' || text[at - 1] == '\n') &&
            looks_like_url(text.substr(at)))
          return at;
      return text.size();
    }();
    std::string_view url = text.substr(start, next_url - start);
    url.remove_prefix(url.find("://") + 3);
    // Credentials: before the last '@' (passwords may hold '@', ':', spaces).
    if (const auto at = url.rfind('@'); at != std::string_view::npos) {
      const std::string_view userinfo = url.substr(0, at);
      const auto colon = userinfo.find(':');
      const std::string_view password = colon == std::string_view::npos ? userinfo : userinfo.substr(colon + 1);
      hide(password);
      std::string_view rest = password;
      for (auto gap = rest.find_first_of(" \t\n"); gap != std::string_view::npos; gap = rest.find_first_of(" \t\n")) {
        hide(rest.substr(0, gap));
        rest.remove_prefix(gap + 1);
      }
      hide(rest);
    }
    // Query values that are secrets (sentinel_password=...), wherever the
    // query sits: before or after '#'.
    for (const std::string_view field : {"password=", "sentinel_password="}) {
      for (auto at = url.find(field); at != std::string_view::npos; at = url.find(field, at + 1)) {
        if (at > 0 && url[at - 1] != '?' && url[at - 1] != '&') continue;
        std::string_view value = url.substr(at + field.size());
        value = value.substr(0, value.find_first_of("&#"));
        hide(value);
      }
    }
  }
}

Redactor& argument_secrets() {
  static Redactor secrets;
  return secrets;
}

bool looks_like_url(std::string_view text) {
  for (const std::string_view scheme : {"redis://", "rediss://", "redis-sentinel://", "rediss-sentinel://",
                                        "redis-cluster://", "rediss-cluster://", "unix://"})
    if (text.starts_with(scheme)) return true;
  return false;
}

std::string Redactor::apply(std::string text) const {
  for (const auto& [secret, shown] : replacements_) {
    for (std::size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at + shown.size())) {
      text.replace(at, secret.size(), shown);
    }
  }
  return text;
}

std::string token_prefix(std::string_view token) {
  std::string shown(token.substr(0, std::min<std::size_t>(8, token.size() / 2)));
  // Whatever a key holds reaches a terminal: no control bytes (escape
  // sequences), nothing outside printable ASCII (review, session 21).
  for (char& c : shown)
    if (c < 0x20 || c > 0x7e) c = '?';
  return shown;
}

std::string format_duration_ms(long long milliseconds) {
  if (milliseconds < 1000) return std::to_string(milliseconds) + " ms";
  char text[32];
  if (milliseconds < 120'000) {
    std::snprintf(text, sizeof text, "%.3g s", static_cast<double>(milliseconds) / 1000.0);
  } else {
    std::snprintf(text, sizeof text, "%.3g min", static_cast<double>(milliseconds) / 60'000.0);
  }
  return text;
}

void Reporter::error(std::string_view message) const { write(message); }

void Reporter::info(std::string_view message) const {
  if (verbose_) write(message);
}

void Reporter::write(std::string_view message) const {
  // One write(2) per line, so lines from the watchdog thread and the main
  // thread never interleave mid-line.
  std::string line = "lockon: " + argument_secrets().apply(redactor_.apply(one_line(message))) + "\n";
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) return;  // stderr is gone; nothing better to do
    done += static_cast<std::size_t>(n);
  }
}

int exit_code_for(const std::exception& error) noexcept {
  if (dynamic_cast<const ConfigError*>(&error) != nullptr) return exit_code::usage;
  if (dynamic_cast<const AuthError*>(&error) != nullptr) return exit_code::auth;
  if (dynamic_cast<const WrongTypeError*>(&error) != nullptr) return exit_code::not_a_lock;
  if (dynamic_cast<const IoError*>(&error) != nullptr || dynamic_cast<const ReplyError*>(&error) != nullptr ||
      dynamic_cast<const PoolTimeoutError*>(&error) != nullptr || dynamic_cast<const QuorumError*>(&error) != nullptr)
    return exit_code::unavailable;
  return exit_code::internal;
}

std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\n') {
      if (!out.empty()) out += "; ";
    } else if (c != '\r') {
      out += c;
    }
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
  return out;
}

int report_failure(const Reporter& reporter, std::string_view context, std::exception_ptr error) {
  try {
    std::rethrow_exception(std::move(error));
  } catch (const std::exception& e) {
    std::string message(context);
    message.append(": ").append(e.what());
    reporter.error(message);
    return exit_code_for(e);
  } catch (...) {
    reporter.error(std::string(context) + ": unknown error");
    return exit_code::internal;
  }
}

}  // namespace lockon::cli
