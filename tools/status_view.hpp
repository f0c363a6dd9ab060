// tools/status_view.hpp — what `lockon status` / `lockon list` read from a
// lock's companion keys and how they print it (text and --json). The record
// format is the library's (src/protocol/holder_record.hpp):
//   "<token first 8>|<host>|<pid>|<process start ms>|<label>|<since ms>"
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lockon::cli {

struct HolderRecord {
  std::string token_prefix{};  // compared with the key's token, never printed
  std::string host{};
  long long pid = 0;
  long long process_start_ms = 0;
  std::string label{};
  long long since_ms = 0;  // held since (holder) / queued since (waiter)
};

/// nullopt when `text` is not a record (wrong field count or numbers).
std::optional<HolderRecord> parse_holder_record(std::string_view text);

/// "host=H pid=P label=L": who, on one line (label omitted when empty).
std::string describe_who(const HolderRecord& record);

/// Waiters of one lock: their records (nullopt: queued without one, e.g.
/// an older client) and when each queued, relative to the server's clock.
struct WaiterView {
  std::optional<HolderRecord> who{};
  long long waiting_ms = -1;  // -1: unknown
};

struct Waiters {
  std::size_t count = 0;
  long long longest_ms = -1;
  std::vector<WaiterView> who{};
};

/// From the queue entries ("<sid>|<waiter id>|...") and the qwho hash
/// (field, value, field, value...), at server time `now_ms`.
Waiters read_waiters(const std::vector<std::string>& queue, const std::vector<std::string>& qwho, long long now_ms);

/// JSON string literal of `text` (quotes included), escaped per RFC 8259.
std::string json_string(std::string_view text);

/// The record as a JSON object (no token prefix).
std::string json_who(const HolderRecord& record);

/// `text` with its control bytes (< 0x20, 0x7f) shown as '?': what a key,
/// a holder record or a token holds reaches a terminal, and an escape
/// sequence there would rewrite it (review, session 21).
std::string terminal_safe(std::string_view text);

}  // namespace lockon::cli
