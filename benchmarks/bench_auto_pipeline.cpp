// The uncontended cycle with automatic pipelining on (auto_pipeline=1): one
// thread, so every call finds the shared connection idle and does its own
// exchange (client/pipeline.hpp). It must cost what the pooled path costs:
// alternating blocks of the raw floor, Lock and lock_on through the pool,
// and the same through the pipeline, in one measurement.
#include <benchmark/benchmark.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "client/client_impl.hpp"
#include "client/pipeline.hpp"
#include "lockon/lockon.hpp"

namespace {

constexpr int kBlock = 200;
constexpr int kRounds = 40;

int noop(int key) { return key; }

std::string with_auto_pipeline(const std::string& url) {
  return url + (url.find('?') == std::string::npos ? "?" : "&") + "auto_pipeline=1";
}

void BM_AutoPipelineUncontended(benchmark::State& state) {
  const std::string url = lockon::bench::server_url();
  lockon::bench::RawFloor floor(url, "bench:apu:floor");
  const lockon::Client pooled(url + (url.find('?') == std::string::npos ? "?" : "&") + "auto_pipeline=0");
  const lockon::Client shared(with_auto_pipeline(url));
  lockon::Lock pooled_lock(pooled, "bench:apu:lock:pool");
  lockon::Lock shared_lock(shared, "bench:apu:lock:shared");
  const lockon::RedisLocker pooled_locker(pooled, {.key_prefix = "bench:apu:pool"});
  const lockon::RedisLocker shared_locker(shared, {.key_prefix = "bench:apu:shared"});
  const auto pooled_noop = pooled_locker.lock_on<0>("bench::apu", &noop);
  const auto shared_noop = shared_locker.lock_on<0>("bench::apu", &noop);
  // Lock: pool first; lock_on: auto_pipeline first, so neither mode always
  // runs last in a round.
  std::vector<lockon::bench::CycleVariant> variants{
      {"floor", [&] { floor.cycle(); }},
      {"lock",
       [&] {
         if (!pooled_lock.try_lock()) throw std::runtime_error("lock busy");
         pooled_lock.unlock();
       }},
      {"lock_auto_pipeline",
       [&] {
         if (!shared_lock.try_lock()) throw std::runtime_error("lock busy");
         shared_lock.unlock();
       }},
      {"lock_on_auto_pipeline", [&] { benchmark::DoNotOptimize(shared_noop(7)); }},
      {"lock_on", [&] { benchmark::DoNotOptimize(pooled_noop(7)); }},
  };
  lockon::bench::run_alternating_blocks(state, variants, kRounds, kBlock);
  // Share of the requests the I/O thread wrote (0: every call found the
  // connection idle and did its own exchange, as one thread should).
  const auto* pipeline = shared.impl()->any_node()->pipeline();
  state.counters["io_thread_batches"] = static_cast<double>(pipeline->io_thread_batches());
  state.counters["pipeline_requests"] = static_cast<double>(pipeline->requests());
}

BENCHMARK(BM_AutoPipelineUncontended)->Iterations(1)->Repetitions(3)->UseRealTime()->ReportAggregatesOnly(true);

const bool registered = [] {
  using lockon::bench::register_ratio;
  const std::string subject = "BM_AutoPipelineUncontended";
  register_ratio({.label = "uncontended Lock with auto_pipeline=1 / raw floor (cycles/s)", .subject = subject,
                  .metric = "ratio_lock_auto_pipeline", .target = 0.95});
  register_ratio({.label = "  the same through the pool / raw floor", .subject = subject, .metric = "ratio_lock",
                  .informational = true});
  register_ratio({.label = "uncontended lock_on with auto_pipeline=1 / raw floor (cycles/s)", .subject = subject,
                  .metric = "ratio_lock_on_auto_pipeline", .target = 0.95});
  register_ratio({.label = "  the same through the pool / raw floor", .subject = subject, .metric = "ratio_lock_on",
                  .informational = true});
  return true;
}();

}  // namespace
