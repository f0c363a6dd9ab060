#include "inspect_command.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iostream>
#include <optional>
#include <vector>

#include "exit_codes.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "report.hpp"
#include "servers.hpp"
#include "status_view.hpp"

namespace lockon::cli {
namespace {

// Deletes the key only if it still holds what we showed the operator.
// Deletes K if it holds ARGV[1], and its holder record (KEYS[2]) if that
// names the same holder (ARGV[2]: the record's token prefix and '|'): the
// next holder's record could not be written over a stale one (issue 35 §1).
constexpr std::string_view kCompareAndDelete =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
    "local record = redis.call('GET', KEYS[2])\n"
    "if record and string.sub(record, 1, #ARGV[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end\n"
    "return redis.call('DEL', KEYS[1])";

// Holders of NAME's read-write lock or semaphore (ReadWriteLock, Semaphore,
// `lockon run -s/-x/--permits`): the shares in companion(NAME, "sh"),
// "<kind>:<token>" scored by their expiry on the server's clock
// (src/shared/shared_scripts.hpp), and the queue companion(NAME, "sq").
// Shares carry no holder record; status shows how many and how long.
// Shares read per node: the ones that end last (live ones first), one more
// to tell whether there are more.
constexpr std::size_t kSharesRead = 100;

struct Shares {
  std::size_t readers = 0, writers = 0, permits = 0;
  long long longest_left_ms = -1;  // the share that ends last; -1: none
  bool more = false;               // more shares than status reads (kSharesRead)
  long long waiting = 0;
  bool any() const { return readers + writers + permits > 0; }
};

// "2 readers", "1 writer", "3 permits": what holds, in words.
std::string describe_shares(const Shares& shares) {
  std::string text;
  const auto part = [&](std::size_t n, const char* one, const char* many) {
    if (n == 0) return;
    if (!text.empty()) text += ", ";
    text += std::to_string(n) + (shares.more ? "+ " : " ") + (n == 1 ? one : many);
  };
  part(shares.writers, "writer", "writers");
  part(shares.readers, "reader", "readers");
  part(shares.permits, "permit", "permits");
  return text;
}

struct NodeView {
  std::string endpoint{};
  std::optional<std::string> error{};  // unreachable / failed: the message
  int error_exit = exit_code::ok;
  std::optional<std::string> not_a_lock{};  // why NAME is not a lock: a key holds another type
  std::optional<std::string> token{};  // nullopt: the key does not exist
  long long pttl = -2;
  std::optional<std::string> fence{};
  std::optional<HolderRecord> holder{};  // the record matching the token
  Waiters waiters{};
  Shares shares{};
  long long now_ms = 0;  // the server's clock

  bool answered() const { return !error; }
  /// The lock NAME itself (shares are told apart: Shares, "shared" in JSON).
  bool held() const { return answered() && (token.has_value() || not_a_lock); }
};

// Which of NAME's keys holds a type lockon never writes there, for a
// WRONGTYPE met while reading them: NAME itself, or a companion key (a
// shared lock's sorted set, a queue) that something else overwrote.
std::string wrong_type_reason(const Client& client, const std::string& key) {
  struct Expected {
    std::string key;
    const char* type;
    const char* type_name;
  };
  const Expected expected[] = {
      {key, "string", "a string"},
      {fence_key(key), "string", "a string"},
      {lock_companion_key(key, "who"), "string", "a string"},
      {lock_companion_key(key, "q"), "list", "a list"},
      {lock_companion_key(key, "qwho"), "hash", "a hash"},
      {lock_companion_key(key, "sh"), "zset", "a sorted set"},
      {lock_companion_key(key, "sq"), "list", "a list"},
  };
  try {
    std::vector<std::vector<std::string>> commands;
    for (const Expected& e : expected) commands.push_back({"TYPE", e.key});
    const auto types = client.pipeline(commands);
    for (std::size_t i = 0; i < std::size(expected); ++i) {
      const std::string type = types[i].as_string();
      if (type == "none" || type == expected[i].type) continue;
      if (i == 0) return "the key holds a " + type + ", not a string";
      return "its key '" + expected[i].key + "' holds a " + type + ", where lockon keeps " + expected[i].type_name;
    }
  } catch (const std::exception&) {
    // The reason is a detail: the WRONGTYPE itself is the answer.
  }
  return "one of its keys holds a type lockon never writes there";
}

NodeView inspect_node(const Client& client, const std::string& key, Reporter& reporter) {
  NodeView view;
  view.endpoint = client.endpoint();
  try {
    // One round trip; the queue shown is bounded (its first 100 waiters).
    const auto replies = client.pipeline({{"GET", key},
                                          {"PTTL", key},
                                          {"GET", fence_key(key)},
                                          {"GET", lock_companion_key(key, "who")},
                                          {"LRANGE", lock_companion_key(key, "q"), "0", "99"},
                                          {"HGETALL", lock_companion_key(key, "qwho")},
                                          {"TIME"},
                                          {"LLEN", lock_companion_key(key, "q")},
                                          {"ZREVRANGE", lock_companion_key(key, "sh"), "0", std::to_string(kSharesRead), "WITHSCORES"},
                                          {"LLEN", lock_companion_key(key, "sq")}});
    if (!replies[0].is_nil()) {
      view.token = replies[0].as_string();
      reporter.redactor().add_token(*view.token);
    }
    view.pttl = replies[1].as_integer();
    if (!replies[2].is_nil()) view.fence = replies[2].as_string();
    const auto& time = replies[6].elements();
    view.now_ms = std::stoll(time.at(0).as_string()) * 1000 + std::stoll(time.at(1).as_string()) / 1000;
    if (view.token && !replies[3].is_nil()) {
      auto record = parse_holder_record(replies[3].as_string());
      // A record of an earlier holder (its token differs) is not shown.
      if (record && !record->token_prefix.empty() && view.token->rfind(record->token_prefix, 0) == 0)
        view.holder = std::move(record);
    }
    std::vector<std::string> queue, qwho;
    for (const Reply& r : replies[4].elements()) queue.push_back(r.as_string());
    for (const Reply& r : replies[5].elements()) qwho.push_back(r.as_string());
    view.waiters = read_waiters(queue, qwho, view.now_ms);
    view.waiters.count = static_cast<std::size_t>(replies[7].as_integer());
    const auto& shares = replies[8].elements();
    for (std::size_t i = 0; i + 1 < shares.size() && i < 2 * kSharesRead; i += 2) {
      const std::string member = shares[i].as_string();
      const std::string score = shares[i + 1].as_string();
      double expiry_ms = 0;
      const auto [end, ec] = std::from_chars(score.data(), score.data() + score.size(), expiry_ms);
      if (ec != std::errc() || end != score.data() + score.size() || !std::isfinite(expiry_ms)) continue;
      if (expiry_ms <= static_cast<double>(view.now_ms) || member.size() < 3 || member[1] != ':')
        continue;  // expired (not yet pruned), or not a share
      reporter.redactor().add_token(member.substr(2));
      if (member[0] == 'x') ++view.shares.writers;
      else if (member[0] == 's') ++view.shares.readers;
      else if (member[0] == 'p') ++view.shares.permits;
      else continue;
      // Bounded: a share's expiry is at most a lease ahead of the server's clock.
      const double left = std::min(expiry_ms - static_cast<double>(view.now_ms), 1e15);
      view.shares.longest_left_ms = std::max(view.shares.longest_left_ms, static_cast<long long>(left));
    }
    view.shares.more = shares.size() > 2 * kSharesRead;
    view.shares.waiting = replies[9].as_integer();
  } catch (const WrongTypeError&) {
    view.not_a_lock = wrong_type_reason(client, key);
  } catch (const std::exception& e) {
    view.error = e.what();
    view.error_exit = exit_code_for(e);
  }
  return view;
}

std::string describe(const NodeView& view) {
  if (view.error) return "unreachable: " + one_line(*view.error);
  if (view.not_a_lock) return "not a lock: " + *view.not_a_lock;
  std::string text;
  if (!view.token && view.shares.any()) {
    text = "held shared: " + describe_shares(view.shares) + ", lease left up to " +
           format_duration_ms(view.shares.longest_left_ms);
  } else if (!view.token) {
    text = "free";
  } else {
    text = "held, ";
    text += view.pttl >= 0 ? "ttl " + format_duration_ms(view.pttl) : std::string("no expiry");
    text += ", token " + token_prefix(*view.token) + "...";
  }
  if (view.fence) text += ", fence " + *view.fence;
  return text;
}

struct Summary {
  std::string state;
  int exit = exit_code::ok;
};

Summary summarize(const std::vector<NodeView>& views) {
  const std::size_t n = views.size();
  const std::size_t quorum = n / 2 + 1;
  std::size_t held = 0;
  std::size_t failed = 0;
  int failure_exit = exit_code::ok;
  for (const auto& v : views) {
    if (v.not_a_lock) return {"not a lock (" + *v.not_a_lock + ")", exit_code::not_a_lock};
    if (v.held()) ++held;
    if (!v.answered()) {
      ++failed;
      failure_exit = v.error_exit;
    }
  }
  const std::string counts = " (" + std::to_string(held) + " of " + std::to_string(n) + " nodes, quorum " +
                             std::to_string(quorum) + ")";
  // Shares live on one server (shared locks take one --url).
  if (n == 1 && !views[0].token && views[0].shares.any())
    return {"held shared (" + describe_shares(views[0].shares) + ")", exit_code::ok};
  if (held >= quorum) return {n == 1 ? "held" : "held" + counts, exit_code::ok};
  if (held + failed < quorum) return {n == 1 ? "free" : "free" + counts, exit_code::ok};
  return {"unknown: too few nodes answered" + (n == 1 ? std::string() : counts), failure_exit};
}

std::vector<NodeView> inspect_all(const Servers& servers, const std::string& key, Reporter& reporter) {
  std::vector<NodeView> views;
  for (const Client& client : servers.clients()) views.push_back(inspect_node(client, key, reporter));
  return views;
}

// Holder and waiters of a node that answered, indented under its line.
void print_details(const NodeView& v) {
  if (!v.answered() || v.not_a_lock) return;
  if (v.token) {
    if (v.holder) {
      std::cout << "  holder: " << describe_who(*v.holder) << '\n';
      std::cout << "  held for: " << format_duration_ms(std::max(0LL, v.now_ms - v.holder->since_ms)) << '\n';
    } else {
      std::cout << "  holder: unknown (no holder record: holder_record off, or an older or non-lockon client)\n";
    }
    std::cout << "  lease left: " << (v.pttl >= 0 ? format_duration_ms(v.pttl) : std::string("no expiry")) << '\n';
  }
  if (v.shares.any() || v.shares.waiting > 0)
    std::cout << "  shared holders: " << (v.shares.any() ? describe_shares(v.shares) : std::string("none"))
              << "; shared waiters: " << v.shares.waiting << '\n';
  std::cout << "  waiters: " << v.waiters.count;
  if (v.waiters.longest_ms >= 0) std::cout << ", longest wait " << format_duration_ms(v.waiters.longest_ms);
  std::cout << '\n';
  std::size_t n = 0;
  for (const WaiterView& w : v.waiters.who) {
    std::cout << "    " << ++n << ". " << (w.who ? describe_who(*w.who) : std::string("(no record)"));
    if (w.waiting_ms >= 0) std::cout << ", waiting " << format_duration_ms(w.waiting_ms);
    std::cout << '\n';
  }
}

void print_views(const std::string& key, const Summary& summary, const std::vector<NodeView>& views,
                 bool details = false) {
  std::cout << "key: " << key << "\nstate: " << summary.state << '\n';
  for (const auto& v : views) {
    std::cout << "node " << v.endpoint << ": " << describe(v) << '\n';
    if (details) print_details(v);
  }
  std::cout << std::flush;
}

// --json: one object; never a token, not even its prefix.
void print_json(const std::string& key, const Summary& summary, const std::vector<NodeView>& views) {
  std::string out = "{\"key\":" + json_string(key) + ",\"state\":" + json_string(summary.state) + ",\"nodes\":[";
  for (std::size_t i = 0; i < views.size(); ++i) {
    const NodeView& v = views[i];
    if (i > 0) out += ',';
    out += "{\"endpoint\":" + json_string(v.endpoint);
    if (v.error) {
      out += ",\"error\":" + json_string(one_line(*v.error)) + "}";
      continue;
    }
    out += ",\"held\":" + std::string(v.held() ? "true" : "false");
    if (v.not_a_lock) out += ",\"not_a_lock\":true,\"not_a_lock_reason\":" + json_string(*v.not_a_lock);
    out += ",\"holder\":" + (v.holder ? json_who(*v.holder) : std::string("null"));
    out += ",\"held_for_ms\":" + (v.holder ? std::to_string(std::max(0LL, v.now_ms - v.holder->since_ms))
                                             : std::string("null"));
    out += ",\"lease_left_ms\":" + (v.token && v.pttl >= 0 ? std::to_string(v.pttl) : std::string("null"));
    const bool numeric = v.fence && !v.fence->empty() && v.fence->find_first_not_of("0123456789") == std::string::npos;
    out += ",\"fence\":" + (v.fence ? (numeric ? *v.fence : json_string(*v.fence)) : std::string("null"));
    out += ",\"waiters\":{\"count\":" + std::to_string(v.waiters.count) + ",\"longest_wait_ms\":" +
           (v.waiters.longest_ms >= 0 ? std::to_string(v.waiters.longest_ms) : std::string("null")) + ",\"who\":[";
    for (std::size_t w = 0; w < v.waiters.who.size(); ++w) {
      const WaiterView& waiter = v.waiters.who[w];
      if (w > 0) out += ',';
      out += "{\"who\":" + (waiter.who ? json_who(*waiter.who) : std::string("null")) + ",\"waiting_ms\":" +
             (waiter.waiting_ms >= 0 ? std::to_string(waiter.waiting_ms) : std::string("null")) + "}";
    }
    out += "]},\"shared\":{\"readers\":" + std::to_string(v.shares.readers) +
           ",\"writers\":" + std::to_string(v.shares.writers) + ",\"permits\":" + std::to_string(v.shares.permits) +
           ",\"more\":" + (v.shares.more ? "true" : "false") + ",\"longest_lease_left_ms\":" +
           (v.shares.any() ? std::to_string(v.shares.longest_left_ms) : std::string("null")) +
           ",\"waiters\":" + std::to_string(v.shares.waiting) + "}}";
  }
  std::cout << out << "]}\n" << std::flush;
}

}  // namespace

std::string fence_key(std::string_view key) { return lock_companion_key(key, "fence"); }

int status_command(const InspectOptions& options) {
  Reporter reporter;
  const Servers servers(options.servers, reporter);
  const auto views = inspect_all(servers, options.key, reporter);
  const Summary summary = summarize(views);
  if (options.json) print_json(options.key, summary, views);
  else print_views(options.key, summary, views, true);
  for (const auto& v : views) {
    if (v.error) reporter.error("status of '" + options.key + "': " + *v.error);
  }
  return summary.exit;
}

int release_command(const InspectOptions& options) {
  Reporter reporter;
  if (!options.force)
    throw ConfigError("release deletes a lock that someone may hold: confirm with --force");
  const Servers servers(options.servers, reporter);
  const auto clients = servers.clients();
  std::vector<NodeView> views;
  for (const Client& client : clients) views.push_back(inspect_node(client, options.key, reporter));
  const Summary summary = summarize(views);
  print_views(options.key, summary, views);
  if (summary.exit == exit_code::not_a_lock) {
    reporter.error("refusing to delete '" + options.key + "': it is " + summary.state);
    return exit_code::not_a_lock;
  }

  int status = exit_code::ok;
  std::size_t deleted = 0;
  std::size_t holding = 0;
  for (std::size_t i = 0; i < clients.size(); ++i) {
    const NodeView& view = views[i];
    if (view.error) {
      reporter.error("cannot release '" + options.key + "': " + *view.error);
      status = view.error_exit;
      continue;
    }
    if (!view.token) continue;
    ++holding;
    try {
      const Reply reply = clients[i].command(
          {"EVAL", std::string(kCompareAndDelete), "2", options.key, lock_companion_key(options.key, "who"), *view.token,
           view.token->substr(0, 8) + "|"});
      if (reply.as_integer() == 1) {
        ++deleted;
        std::cout << "node " << view.endpoint << ": deleted (was held by token " << token_prefix(*view.token)
                  << "...)\n";
      } else {
        reporter.error("'" + options.key + "' on " + view.endpoint +
                       " changed while releasing; nothing deleted there (run again)");
        if (status == exit_code::ok) status = exit_code::timed_out;
      }
    } catch (const std::exception& e) {
      reporter.error("cannot release '" + options.key + "': " + e.what());
      status = exit_code_for(e);
    }
  }
  for (const NodeView& view : views) {
    if (view.shares.any())
      std::cout << "node " << view.endpoint << ": the shared holders (" << describe_shares(view.shares)
                << ") are not released: a share ends when its holder releases it, or with its lease if the holder died\n";
  }
  if (holding == 0) {
    std::cout << "nothing to release: '" << options.key << "' is not held on any node that answered\n";
  } else {
    std::cout << "released '" << options.key << "' on " << deleted << " of " << clients.size()
              << (clients.size() == 1 ? " node\n" : " nodes\n");
  }
  std::cout << std::flush;
  return status;
}

}  // namespace lockon::cli
