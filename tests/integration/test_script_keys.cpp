// integration/test_script_keys.cpp — every key a lockon script touches is
// declared in its KEYS.
//
// Redis's scripting rule: "all names of keys accessed by a script must be
// provided as input key arguments". Redis itself does not enforce it on a
// single server or for keys of the same hash slot, but servers and proxies
// that do (Dragonfly by default, Alibaba Cloud's cluster proxy, Redis
// Enterprise's proxy in some modes) reject a script that derives a key
// inside Lua, and a cluster router can only route by declared keys.
//
// How it is checked, on a real server: MONITOR records every command the
// workload sends and every command its scripts run ("[db lua]" lines, which
// follow their EVAL/EVALSHA line: the server runs one command at a time);
// the server itself says which arguments of each script-run command are
// keys (COMMAND GETKEYS); each must be among the enclosing EVAL's KEYS.
// The workload goes through every script path of Lock (fast and queued
// acquisition, hand-over with holder records, fencing, extend, reacquire,
// renewal, a waiter giving up, a kept queue place abandoned), Redlock,
// ReadWriteLock, Semaphore, MultiLock and lock_on.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lockon/lockon.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

// One MONITOR line split into its arguments ("1.2 [0 lua] \"SET\" \"k\"").
struct MonitorLine {
  std::string origin;  // "lua", or the client's address
  std::vector<std::string> args;
};

// Unquotes MONITOR's sdscatrepr() quoting: \" \\ \n \r \t \a \b \xHH.
std::vector<std::string> split_quoted(const std::string& text, std::size_t from) {
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

MonitorLine parse_monitor_line(const std::string& text) {
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

bool is_script_call(const std::string& command) {
  return command == "eval" || command == "evalsha" || command == "eval_ro" || command == "evalsha_ro" ||
         command == "EVAL" || command == "EVALSHA";
}

class ScriptKeys : public RedisTest {
 protected:
  // The keys of one command according to the server (none for PUBLISH,
  // TIME...). Any other error fails the test.
  std::vector<std::string> keys_of(const std::vector<std::string>& args) {
    std::vector<std::string> request{"COMMAND", "GETKEYS"};
    request.insert(request.end(), args.begin(), args.end());
    const RawReply reply = server().command(request);
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

  struct Verdict {
    int scripts = 0;          // EVAL/EVALSHA seen
    int script_commands = 0;  // commands run by scripts
    std::set<std::string> commands;  // names of the commands scripts ran
    std::vector<std::string> violations;
  };

  Verdict check(const std::vector<std::string>& lines) {
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
};

TEST(ScriptKeysParsing, MonitorLinesAreSplitAndUnquoted) {
  const MonitorLine line = parse_monitor_line(R"(1795476566.385482 [0 lua] "SET" "a\"b\\c" "x\x01y" "")");
  EXPECT_EQ(line.origin, "lua");
  ASSERT_EQ(line.args.size(), 4u);
  EXPECT_EQ(line.args[0], "SET");
  EXPECT_EQ(line.args[1], "a\"b\\c");
  EXPECT_EQ(line.args[2], std::string("x\x01y"));
  EXPECT_EQ(line.args[3], "");
  const MonitorLine client = parse_monitor_line(R"(1.5 [3 127.0.0.1:4242] "evalsha" "abc" "1" "k")");
  EXPECT_EQ(client.origin, "127.0.0.1:4242");
  ASSERT_EQ(client.args.size(), 4u);
}

// Every script path of every primitive, under MONITOR.
TEST_F(ScriptKeys, EveryKeyAScriptTouchesIsDeclared) {
  Monitor monitor(server().host(), server().port());
  Client client(server().url());
  const std::string name = key("keys");
  {
    // Fast path, fencing, holder record, extend, reacquire, renewal.
    Lock lock(client, name, {.ttl = 600ms, .fencing = true, .holder_label = "script-keys"});
    lock.lock();
    lock.extend(200ms);
    lock.reacquire();
    std::this_thread::sleep_for(450ms);  // the watchdog renews at ttl/3
    lock.unlock();
    ASSERT_EQ(lock.last_unlock_error(), nullptr);
  }
  {
    // Queued waiters, hand-over with holder records, a waiter giving up, a
    // kept queue place abandoned.
    Lock holder(client, name, {.ttl = 5s, .fencing = true});
    holder.lock();
    Lock quitter(client, name, {.ttl = 5s});
    EXPECT_FALSE(quitter.try_lock_for(50ms));
    Lock keeper(client, name, {.ttl = 5s, .keep_queue_place = true});
    EXPECT_FALSE(keeper.try_lock_for(50ms));
    std::atomic<bool> waiter_got{false};
    std::thread waiter([&] {
      Lock next(client, name, {.ttl = 5s, .fencing = true, .holder_label = "waiter"});
      if (next.try_lock_for(5s)) {
        waiter_got = true;
        next.unlock();
      }
    });
    std::this_thread::sleep_for(150ms);  // the waiter is queued behind the keeper
    holder.unlock();                     // handed to the keeper's kept place
    EXPECT_TRUE(keeper.try_lock_for(1s));
    keeper.unlock();  // handed on to the waiter
    waiter.join();
    EXPECT_TRUE(waiter_got);
    Lock kept(client, name, {.ttl = 5s, .keep_queue_place = true});
    Lock blocker(client, name, {.ttl = 5s});
    blocker.lock();
    EXPECT_FALSE(kept.try_lock_for(50ms));
    kept.abandon_wait();
    blocker.unlock();
  }
  {
    Redlock redlock(std::vector<Client>{client}, key("redlock"), {.ttl = 2s, .fencing = true});
    redlock.lock();
    redlock.extend(100ms);
    redlock.unlock();
  }
  {
    const std::string rw = key("rw");
    ReadWriteLock reader(client, rw), writer(client, rw);
    reader.lock_shared();
    std::thread queued_writer([&] {
      if (writer.try_lock_for(5s)) writer.unlock();
    });
    std::this_thread::sleep_for(100ms);
    reader.unlock_shared();
    queued_writer.join();
    const std::string sem = key("sem");
    Semaphore one(client, sem, 1), two(client, sem, 1);
    one.acquire();
    EXPECT_FALSE(two.try_acquire_for(50ms));
    std::thread queued([&] {
      if (two.try_acquire_for(5s)) two.release();
    });
    std::this_thread::sleep_for(100ms);
    one.release();
    queued.join();
  }
  {
    const std::string tag = key("m");
    MultiLock all(client, {"{" + tag + "}1", "{" + tag + "}2", "{" + tag + "}3"}, {.fencing = true});
    all.lock();
    all.unlock();
    RedisLocker locker(client);
    const auto locked = locker.lock_on<0>("script_keys", [](int x) { return x + 1; });
    EXPECT_EQ(locked(41), 42);
  }
  const std::string marker = "script-keys-end-" + name;
  server().command({"ECHO", marker});
  const Verdict verdict = check(monitor.read_until(marker));
  // The workload really ran scripts (a MONITOR that saw nothing proves nothing).
  EXPECT_GT(verdict.scripts, 20);
  EXPECT_GT(verdict.script_commands, 60);
  for (const char* command : {"SET", "PEXPIRE", "LPOP", "RPUSH", "HSETNX"})
    EXPECT_EQ(verdict.commands.count(command), 1u) << command << " never ran in a script";
  EXPECT_TRUE(verdict.violations.empty()) << verdict.violations.size() << " undeclared key accesses; first: "
                                          << (verdict.violations.empty() ? "" : verdict.violations.front());
  std::set<std::string> distinct(verdict.violations.begin(), verdict.violations.end());
  for (const auto& violation : distinct) ADD_FAILURE() << violation;
}

}  // namespace
}  // namespace lockon::test
