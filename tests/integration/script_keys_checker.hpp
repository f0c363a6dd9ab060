// integration/script_keys_checker.hpp — the MONITOR reader and the "every
// key a script touches is declared" checker shared by test_script_keys.cpp
// (one server) and test_script_keys_cluster.cpp (a cluster master).
//
// MONITOR records every command a workload sends and every command its
// scripts run ("[db lua]" lines, which follow their EVAL/EVALSHA line: the
// server runs one command at a time); the server says which arguments of
// each script-run command are keys (COMMAND GETKEYS, through `keys_of`);
// each must be among the enclosing EVAL's KEYS.
#pragma once

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/redis_server.hpp"

namespace lockon::test::script_keys {

// One MONITOR line split into its arguments ("1.2 [0 lua] \"SET\" \"k\"").
struct MonitorLine {
  std::string origin;  // "lua", or the client's address
  std::vector<std::string> args;
};

// Unquotes MONITOR's sdscatrepr() quoting: \" \\ \n \r \t \a \b \xHH.
inline std::vector<std::string> split_quoted(const std::string& text, std::size_t from) {
  std::vector<std::string> args;
  std::size_t i = from;
  while (i < text.size()) {
    if (text[i] != '"') {
      ++i;
      continue;
    }
    std::string arg;
    for (++i; i < text.size() && text[i] != '"'; ++i) {
      if (text[i] != '\\' || i + 1 >= text.size()) {
        arg.push_back(text[i]);
        continue;
      }
      const char escaped = text[++i];
      switch (escaped) {
        case 'n': arg.push_back('\n'); break;
        case 'r': arg.push_back('\r'); break;
        case 't': arg.push_back('\t'); break;
        case 'a': arg.push_back('\a'); break;
        case 'b': arg.push_back('\b'); break;
        case 'x':
          if (i + 2 < text.size()) {
            arg.push_back(static_cast<char>(std::strtol(text.substr(i + 1, 2).c_str(), nullptr, 16)));
            i += 2;
          }
          break;
        default: arg.push_back(escaped);
      }
    }
    ++i;  // the closing quote
    args.push_back(std::move(arg));
  }
  return args;
}

inline MonitorLine parse_monitor_line(const std::string& text) {
  MonitorLine line;
  const auto open = text.find('[');
  const auto close = text.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return line;
  const std::string inside = text.substr(open + 1, close - open - 1);  // "0 lua" or "0 127.0.0.1:5555"
  const auto space = inside.find(' ');
  line.origin = space == std::string::npos ? inside : inside.substr(space + 1);
  line.args = split_quoted(text, close + 1);
  return line;
}

// A MONITOR connection read on its own thread until a marker line arrives.
class Monitor {
 public:
  Monitor(const std::string& host, int port) {
    context_.reset(redisConnect(host.c_str(), port));
    if (!context_ || context_->err) throw std::runtime_error("cannot connect the MONITOR connection");
    const timeval timeout{10, 0};  // a read stuck this long fails the test below
    redisSetTimeout(context_.get(), timeout);
    auto* reply = static_cast<redisReply*>(redisCommand(context_.get(), "MONITOR"));
    if (reply == nullptr) throw std::runtime_error("MONITOR failed");
    freeReplyObject(reply);
  }

  // Reads until a line carries `marker` (sent by the caller with ECHO after
  // the workload); returns every line before it.
  std::vector<std::string> read_until(const std::string& marker) {
    std::vector<std::string> lines;
    for (int i = 0; i < 2'000'000; ++i) {
      void* raw = nullptr;
      if (redisGetReply(context_.get(), &raw) != REDIS_OK || raw == nullptr)
        throw std::runtime_error("MONITOR read failed (or no line for 10 s)");
      auto* reply = static_cast<redisReply*>(raw);
      std::string text(reply->str == nullptr ? "" : std::string(reply->str, reply->len));
      freeReplyObject(reply);
      if (text.find(marker) != std::string::npos) return lines;
      lines.push_back(std::move(text));
    }
    throw std::runtime_error("MONITOR: marker not seen in 2,000,000 lines");
  }

 private:
  struct Free {
    void operator()(redisContext* c) const noexcept { redisFree(c); }
  };
  std::unique_ptr<redisContext, Free> context_;
};

inline bool is_script_call(const std::string& command) {
  return command == "eval" || command == "evalsha" || command == "eval_ro" || command == "evalsha_ro" ||
         command == "EVAL" || command == "EVALSHA";
}

struct Verdict {
  int scripts = 0;                 // EVAL/EVALSHA seen
  int script_commands = 0;         // commands run by scripts
  std::set<std::string> commands;  // names of the commands scripts ran
  std::vector<std::string> violations;
};

using KeysOf = std::function<std::vector<std::string>(const std::vector<std::string>&)>;

// The keys of one command according to `server` (none for PUBLISH, TIME...).
// Any other error fails the test.
inline std::vector<std::string> keys_on(RedisServer& server, const std::vector<std::string>& args) {
  std::vector<std::string> request{"COMMAND", "GETKEYS"};
  request.insert(request.end(), args.begin(), args.end());
  const RawReply reply = server.command(request);
  if (reply.is_error()) {
    if (reply.str.find("no key arguments") != std::string::npos ||
        reply.str.find("wrong number of arguments for 'command|getkeys'") != std::string::npos)
      return {};
    ADD_FAILURE() << "COMMAND GETKEYS " << args.front() << ": " << reply.str;
    return {};
  }
  std::vector<std::string> keys;
  for (const auto& element : reply.elements) keys.push_back(element.str);
  return keys;
}

inline Verdict check(const std::vector<std::string>& lines, const KeysOf& keys_of) {
  Verdict verdict;
  std::set<std::string> declared;
  bool in_script = false;
  for (const auto& text : lines) {
    const MonitorLine line = parse_monitor_line(text);
    if (line.args.empty()) continue;
    if (line.origin != "lua") {
      in_script = is_script_call(line.args[0]);
      declared.clear();
      if (!in_script) continue;
      ++verdict.scripts;
      const long long count = line.args.size() > 2 ? std::atoll(line.args[2].c_str()) : 0;
      for (long long k = 0; k < count && 3 + k < static_cast<long long>(line.args.size()); ++k)
        declared.insert(line.args[static_cast<std::size_t>(3 + k)]);
      continue;
    }
    if (!in_script) {
      verdict.violations.push_back("a script command with no script before it: " + text.substr(0, 120));
      continue;
    }
    ++verdict.script_commands;
    verdict.commands.insert(line.args[0]);
    for (const auto& key : keys_of(line.args))
      if (declared.count(key) == 0)
        verdict.violations.push_back(line.args[0] + " on undeclared key '" + key + "' (declared: " +
                                     std::to_string(declared.size()) + " keys)");
  }
  return verdict;
}

}  // namespace lockon::test::script_keys
