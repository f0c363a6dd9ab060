// What the server spends inside lockon's contended scripts, against a bare
// FIFO lock making the same server calls (queue_fat, process_bench.hpp).
//
// The release script is the whole of the server's work on a hand-over's
// critical path, and the queueing script runs beside the next holder's
// critical section (docs/benchmarks.md, session 20): their cost is read
// here from the server's own accounting (INFO commandstats, EVALSHA usec),
// free of the clients' scheduling noise that dominates the process
// benchmark. One thread plays two processes, A and B, each with its own
// subscriber connection and its own process nonce: the holder's rival
// queues (wait_attempt, enqueue), the holder releases (release hands the
// key to the rival and publishes), the rival reads its wake-up, and they
// swap roles with a fresh token. The baseline does the same with the
// queue_fat scripts. Alternating blocks of kCycles; medians of the blocks.
#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "common/token.hpp"
#include "protocol/holder_record.hpp"
#include "protocol/lock_scripts.hpp"
#include "process_bench.hpp"

namespace {

using lockon::bench::processes::Raw;
namespace scripts = lockon::detail::scripts;

constexpr int kCycles = 200;  // per block
constexpr int kRounds = 15;   // blocks of each variant

// The server's EVALSHA time and call count so far.
std::pair<double, long long> evalsha_usage(Raw& admin) {
  const auto info = admin.run({"INFO", "commandstats"});
  const std::string text(info->str, info->len);
  const auto at = text.find("cmdstat_evalsha:");
  if (at == std::string::npos) return {0, 0};
  const auto field = [&](const std::string& name) {
    const auto from = text.find(name + "=", at);
    return std::stod(text.substr(from + name.size() + 1));
  };
  return {field("usec"), static_cast<long long>(field("calls"))};
}

void expect_integer(const Raw::Reply& reply, const char* what) {
  if (reply->type == REDIS_REPLY_ERROR) throw std::runtime_error(std::string(what) + ": " + reply->str);
}

// One "process": its subscriber connection and the nonce its tokens and
// subscriber id end in (two processes, so the queueing script takes the
// cross-process path, as across separate services).
struct Player {
  Player(const std::string& url, const std::string& lockon_channel_key, const std::string& fat_key)
      : subscriber(url), nonce(lockon::detail::random_hex(6)), sid(lockon::detail::random_hex(8) + "." + nonce) {
    for (const std::string& channel : {lockon::detail::wake_channel(lockon_channel_key, sid), fat_key + ":wake:" + sid}) {
      const char* argv[] = {"SUBSCRIBE", channel.c_str()};
      redisAppendCommandArgv(subscriber.context(), 2, argv, nullptr);
      read_message();  // the confirmation
    }
  }
  std::string new_token() const { return lockon::detail::random_hex(16) + "." + nonce; }
  void read_message() {
    void* reply = nullptr;
    if (redisGetReply(subscriber.context(), &reply) != REDIS_OK || reply == nullptr)
      throw std::runtime_error("subscriber read failed");
    freeReplyObject(reply);
  }
  Raw subscriber;
  std::string nonce, sid, token;
};

void BM_ContendedScriptCost(benchmark::State& state) {
  const std::string url = lockon::bench::server_url();
  Raw data(url);
  Raw admin(url);
  const std::string key = "bench:script-cost";
  const std::string fat_key = "bench:script-cost-fat";
  const auto keys = lockon::detail::lock_script_keys(key);
  std::array<Player, 2> players{Player(url, key, fat_key), Player(url, key, fat_key)};
  const std::string wait_sha = scripts::wait_attempt().sha();
  const std::string release_sha = scripts::release().sha();
  data.run({"SCRIPT", "LOAD", scripts::wait_attempt().body()});
  data.run({"SCRIPT", "LOAD", scripts::release().body()});
  const std::string fat_queue = data.run({"SCRIPT", "LOAD", lockon::bench::processes::queue_fat::kQueue})->str;
  const std::string fat_release = data.run({"SCRIPT", "LOAD", lockon::bench::processes::queue_fat::kRelease})->str;

  const auto lockon_block = [&](int cycles) {
    int holder = 0;
    for (int i = 0; i < cycles; ++i) {
      Player& waiter = players[static_cast<std::size_t>(1 - holder)];
      waiter.token = waiter.new_token();
      const std::string entry = waiter.sid + "|" + lockon::detail::random_hex(8) + "|30000|0|" + waiter.token;
      expect_integer(data.run({"EVALSHA", wait_sha, "7", keys[0], keys[1], keys[2], keys[3], keys[4], keys[5], keys[6],
                               entry, "1", "60000", "1", lockon::detail::holder_record(waiter.token, "bench")}),
                     "wait_attempt");
      const auto released = data.run({"EVALSHA", release_sha, "7", keys[0], keys[1], keys[2], keys[3], keys[4], keys[5],
                                       keys[6], players[static_cast<std::size_t>(holder)].token});
      if (released->type != REDIS_REPLY_INTEGER || released->integer != 1)
        throw std::runtime_error("release did not hand the key over");
      waiter.read_message();
      holder = 1 - holder;
    }
  };
  const auto fat_block = [&](int cycles) {
    int holder = 0;
    for (int i = 0; i < cycles; ++i) {
      Player& waiter = players[static_cast<std::size_t>(1 - holder)];
      expect_integer(data.run({"EVALSHA", fat_queue, "2", fat_key, fat_key + ":q", waiter.sid}), "fat queue");
      const auto released = data.run({"EVALSHA", fat_release, "2", fat_key, fat_key + ":q"});
      if (released->type != REDIS_REPLY_INTEGER || released->integer != 1)
        throw std::runtime_error("fat release did not hand the key over");
      waiter.read_message();
      holder = 1 - holder;
    }
  };
  // Starting state: A holds both locks.
  players[0].token = players[0].new_token();
  std::vector<double> lockon_us, fat_us;
  for (auto _ : state) {
    lockon_us.clear();
    fat_us.clear();
    data.run({"SET", key, players[0].token, "PX", "30000"});
    data.run({"SET", fat_key, players[0].sid, "PX", "30000"});
    lockon_block(kCycles);  // warm-up, uncounted
    fat_block(kCycles);
    for (int round = 0; round < kRounds; ++round) {
      for (int variant = 0; variant < 2; ++variant) {
        const bool lockon_first = round % 2 == 0;  // rotate the order
        const bool run_lockon = (variant == 0) == lockon_first;
        const auto before = evalsha_usage(admin);
        if (run_lockon) lockon_block(kCycles);
        else fat_block(kCycles);
        const auto after = evalsha_usage(admin);
        const double us = (after.first - before.first) / static_cast<double>(std::max(1LL, after.second - before.second));
        (run_lockon ? lockon_us : fat_us).push_back(us);
      }
    }
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  state.counters["lockon_us_per_script"] = median(lockon_us);
  state.counters["fat_us_per_script"] = median(fat_us);
  data.run({"DEL", key, fat_key});
}

BENCHMARK(BM_ContendedScriptCost)->Iterations(1)->Repetitions(3)->UseRealTime()->ReportAggregatesOnly(true);

const bool registered = lockon::bench::register_ratio(
    {.label = "contended scripts: server µs per EVALSHA, lockon / a bare FIFO lock making the same calls",
     .subject = "BM_ContendedScriptCost",
     .baseline = "BM_ContendedScriptCost",
     .metric = "lockon_us_per_script",
     .baseline_metric = "fat_us_per_script",
     .informational = true});

}  // namespace
