// What the process benchmark (bench_processes.cpp) and its worker processes
// (bench_process_worker.cpp) share: a raw hiredis connection, the clock
// they agree on (CLOCK_MONOTONIC is shared by the processes of one
// machine), and resource usage. Internal to the benchmarks.
#pragma once

#include <hiredis/hiredis.h>
#include <sys/resource.h>

#include <chrono>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "lockon/options.hpp"

namespace lockon::bench::processes {

using Clock = std::chrono::steady_clock;

class Raw {
 public:
  explicit Raw(const std::string& url) {
    const auto options = lockon::ConnectionOptions::from_url(url);
    context_.reset(redisConnect(options.host.c_str(), options.port));
    if (!context_ || context_->err) throw std::runtime_error("cannot connect to " + url);
  }
  struct Free {
    void operator()(redisReply* r) const { freeReplyObject(r); }
  };
  using Reply = std::unique_ptr<redisReply, Free>;
  redisContext* context() { return context_.get(); }
  Reply run(std::initializer_list<std::string> args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    Reply reply(static_cast<redisReply*>(
        redisCommandArgv(context_.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (!reply) throw std::runtime_error("raw command failed");
    return reply;
  }

 private:
  std::unique_ptr<redisContext, decltype(&redisFree)> context_{nullptr, &redisFree};
};

inline long long ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
inline Clock::time_point from_ns(long long ns) {
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns)));
}

struct Usage {
  long long voluntary = 0, involuntary = 0;
  double cpu_s = 0;
  static Usage now() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return {u.ru_nvcsw, u.ru_nivcsw,
            static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
                static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6};
  }
};

// The bare FIFO lock of lockon's shape (QueueLock in bench_process_worker.cpp)
// making the server calls lockon's scripts make on the contended path:
// KEYS = lock, queue; the queueing script takes the waiter's id (ARGV[1]),
// the release hands the lock to the queue's head and PUBLISHes to
// "<lock>:wake:<id>". Also the baseline of BM_ContendedScriptCost.
namespace queue_fat {
// The server work of lockon's scripts on the contended path (its reads and
// writes of the hand-over, holder and liveness records), keys and values
// alike but not their logic. Since session 20 lockon's release pops the
// queue without an EXISTS first, and its queueing script reads no holder
// record when both tokens are random: neither is here any more.
inline constexpr const char* kQueue =
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 1 end\n"
    "redis.call('GET', KEYS[1]) redis.call('RPUSH', KEYS[2], ARGV[1]) redis.call('PEXPIRE', KEYS[2], 60000)\n"
    "redis.call('HSETNX', KEYS[2] .. 'who', ARGV[1], 'host|1|2|label|') redis.call('PEXPIRE', KEYS[2] .. 'who', 60000)\n"
    "redis.call('PTTL', KEYS[1]) return 0";
inline constexpr const char* kRelease =
    "redis.call('GET', KEYS[1])\n"
    "local e = redis.call('LPOP', KEYS[2])\n"
    "if not e then redis.call('DEL', KEYS[1]) return 0 end\n"
    "local info = redis.call('HGET', KEYS[2] .. 'who', e) redis.call('HDEL', KEYS[2] .. 'who', e)\n"
    "local t = redis.call('TIME')\n"
    "redis.call('SET', KEYS[1] .. ':who', (info or '') .. string.format('%.0f', tonumber(t[1]) * 1000), 'PX', 30000)\n"
    "redis.call('SET', KEYS[1], e, 'PX', 30000) redis.call('SET', KEYS[1] .. ':hf', e .. ' 0', 'PX', 30000)\n"
    "redis.call('SET', KEYS[1] .. ':hs', e, 'PX', 60000)\n"
    "redis.call('PUBLISH', KEYS[1] .. ':wake:' .. e, 't') return 1";
}  // namespace queue_fat

}  // namespace lockon::bench::processes
