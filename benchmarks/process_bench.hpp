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

}  // namespace lockon::bench::processes
