// `lockon list [PATTERN]`: the locks held now. A lock is a string key with a
// holder record (src/protocol/holder_record.hpp) whose token prefix matches its value:
// SCAN MATCH PATTERN over the servers that hold keys (Client::masters:
// the server, Sentinel's master, every Cluster master), companion keys skipped. Bounded:
// at most options.limit locks shown and kMaxScanned keys examined.
#include <algorithm>
#include <iostream>

#include "exit_codes.hpp"
#include "inspect_command.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "report.hpp"
#include "servers.hpp"
#include "status_view.hpp"

namespace lockon::cli {
namespace {

constexpr std::size_t kMaxScanned = 1'000'000;

bool is_companion(std::string_view key) {
  for (const std::string_view suffix : {":q", ":fence", ":hf", ":who", ":qwho", ":hs"}) {
    if (key.size() > suffix.size() && key.substr(key.size() - suffix.size()) == suffix) return true;
  }
  return false;
}

struct Held {
  std::string key;
  HolderRecord who;
  long long pttl = -1;
  long long now_ms = 0;
};

// The candidates of one SCAN page that are held locks with a record.
void examine(const Client& client, const std::vector<std::string>& keys, std::vector<Held>& out, Reporter& reporter) {
  std::vector<std::vector<std::string>> commands;
  for (const auto& key : keys) commands.push_back({"GET", lock_companion_key(key, "who")});
  if (commands.empty()) return;
  const auto records = client.pipeline(commands);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (records[i].is_nil()) continue;
    auto who = parse_holder_record(records[i].as_string());
    if (!who || who->token_prefix.empty()) continue;
    try {
      const auto r = client.pipeline({{"GET", keys[i]}, {"PTTL", keys[i]}, {"TIME"}});
      if (r[0].is_nil() || r[0].as_string().rfind(who->token_prefix, 0) != 0) continue;
      reporter.redactor().add_token(r[0].as_string());
      const auto& time = r[2].elements();
      out.push_back({keys[i], *who, r[1].as_integer(),
                     std::stoll(time.at(0).as_string()) * 1000 + std::stoll(time.at(1).as_string()) / 1000});
    } catch (const WrongTypeError&) {
      // Not a lock: a record's name collides with another kind of key.
    }
  }
}

}  // namespace

int list_command(const InspectOptions& options) {
  Reporter reporter;
  const Servers servers(options.servers, reporter);
  const std::string pattern = options.key.empty() ? "*" : options.key;
  std::vector<Held> held;
  std::size_t scanned = 0;
  bool complete = false;
  try {
    for (const Client& url_client : servers.clients()) {
      complete = true;  // every target scanned to its end
      // Each server that holds keys (a Cluster: every master, through a
      // client of its own: SCAN runs on one server, and one page's keys
      // span slots, which a Cluster client refuses to probe in one pipeline).
      for (const ConnectionOptions& master : url_client.masters()) {
        const Client client(master);
        std::string cursor = "0";
        bool scanned_all = false;
        while (held.size() < options.limit && scanned < kMaxScanned) {
          const Reply page = client.command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
          cursor = page.elements().at(0).as_string();
          std::vector<std::string> keys;
          for (const Reply& k : page.elements().at(1).elements()) {
            ++scanned;
            if (!is_companion(k.as_string())) keys.push_back(k.as_string());
          }
          examine(client, keys, held, reporter);
          if (cursor == "0") {
            scanned_all = true;
            break;
          }
        }
        complete = complete && scanned_all;
      }
      if (!held.empty()) break;  // Redlock: the first node that answers with locks
    }
  } catch (const std::exception& e) {
    reporter.error("list '" + pattern + "': " + e.what());
    return exit_code_for(e);
  }
  std::sort(held.begin(), held.end(), [](const Held& a, const Held& b) { return a.key < b.key; });
  if (held.size() > options.limit) held.resize(options.limit);
  if (options.json) {
    std::string out = "{\"pattern\":" + json_string(pattern) + ",\"complete\":" + (complete ? "true" : "false") +
                      ",\"locks\":[";
    for (std::size_t i = 0; i < held.size(); ++i) {
      const Held& h = held[i];
      if (i > 0) out += ',';
      out += "{\"key\":" + json_string(h.key) + ",\"holder\":" + json_who(h.who) +
             ",\"held_for_ms\":" + std::to_string(std::max(0LL, h.now_ms - h.who.since_ms)) +
             ",\"lease_left_ms\":" + (h.pttl >= 0 ? std::to_string(h.pttl) : std::string("null")) + "}";
    }
    std::cout << out << "]}\n" << std::flush;
    return exit_code::ok;
  }
  for (const Held& h : held) {
    std::cout << terminal_safe(h.key) << "  held for " << format_duration_ms(std::max(0LL, h.now_ms - h.who.since_ms))
              << ", lease left " << (h.pttl >= 0 ? format_duration_ms(h.pttl) : std::string("no expiry")) << ", "
              << describe_who(h.who) << '\n';
  }
  std::cout << held.size() << (held.size() == 1 ? " lock" : " locks") << " held"
            << (complete ? "" : " (listing cut short: --limit reached or too many keys)") << '\n'
            << std::flush;
  return exit_code::ok;
}

}  // namespace lockon::cli
