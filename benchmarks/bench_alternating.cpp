// The uncontended cycle again, drift-proof: the raw floor and each lockon
// variant run in alternating blocks of cycles inside one measurement, so a
// machine that speeds up or slows down (shared virtual cores do, by 3x over
// an hour here) affects every variant alike. Reports each variant's cycle
// rate relative to the floor as counters (ratio_*), and lock_on's against
// the floor run on a key of lock_on's length (the server's share).
#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "client/client_impl.hpp"
#include "lockon/lockon.hpp"
#include "client/script.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBlock = 200;
constexpr int kRounds = 40;
constexpr const char* kCompareAndDelete =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

int noop(int, const std::string&, const std::string&) { return 0; }
inline constexpr auto decorated_noop = lockon::decorate<"bench::alt_decorated_noop", 0, 1, 2>(&noop);

void BM_AlternatingCycles(benchmark::State& state) {
  const std::string url = lockon::bench::server_url();
  lockon::bench::RawFloor floor(url, "bench:alt:floor");
  const std::string token = "0123456789abcdef0123456789abcdef";

  const lockon::Client client(url);
  static const lockon::detail::Script compare_and_delete(kCompareAndDelete);
  lockon::Lock lock(client, "bench:alt:lock");
  lockon::Lock fenced(client, "bench:alt:fenced", {.fencing = true});
  lockon::Lock unrecorded(client, "bench:alt:unrecorded", {.holder_record = false});
  const lockon::RedisLocker locker(client, {.key_prefix = "bench"});
  const auto locked_noop = locker.lock_on<0, 1, 2>("bench::noop", &noop);
  const std::string account = "account-42";
  const std::string currency = "EUR";
  // The floor again on a key of lock_on's layout and length (80 bytes here,
  // key.hpp; the short floor key has 15): Redis hashes and Lua interns every
  // key, so part of lock_on's gap to the floor is its key, not its client.
  lockon::bench::RawFloor long_key_floor(url, lockon::lock_on_key("bench", "bench::floor", 7, account, currency));

  std::vector<lockon::bench::CycleVariant> variants{
      {"floor", [&] { floor.cycle(); }},
      {"client_layer",
       [&] {
         const std::array<std::string_view, 6> set{"SET", "bench:alt:client", token, "NX", "PX", "30000"};
         const std::array<std::string_view, 1> keys{"bench:alt:client"};
         const std::array<std::string_view, 1> args{token};
         auto connection = client.impl()->pool().borrow();
         connection->command(set, "SET");
         lockon::detail::eval(*connection, compare_and_delete, keys, args, "release");
       }},
      {"lock",
       [&] {
         if (!lock.try_lock()) throw std::runtime_error("lock busy");
         lock.unlock();
       }},
      {"lock_no_holder_record",
       [&] {
         if (!unrecorded.try_lock()) throw std::runtime_error("lock busy");
         unrecorded.unlock();
       }},
      {"lock_fenced",
       [&] {
         if (!fenced.try_lock()) throw std::runtime_error("fenced lock busy");
         fenced.unlock();
       }},
      {"lock_on", [&] { benchmark::DoNotOptimize(locked_noop(7, account, currency)); }},
      {"decorated", [&] { benchmark::DoNotOptimize(decorated_noop(7, account, currency)); }},
      {"floor_lock_on_key", [&] { long_key_floor.cycle(); }},
  };
  lockon::set_default_locker(lockon::RedisLocker(client, {.key_prefix = "bench"}));
  lockon::bench::run_alternating_blocks(state, variants, kRounds, kBlock);
  // lock_on against the floor on a key like its own.
  state.counters["ratio_lock_on_vs_same_key_floor"] =
      state.counters["us_per_cycle_floor_lock_on_key"].value / state.counters["us_per_cycle_lock_on"].value;
  state.counters["ratio_decorated_vs_same_key_floor"] =
      state.counters["us_per_cycle_floor_lock_on_key"].value / state.counters["us_per_cycle_decorated"].value;
  lockon::reset_default_locker();
}

BENCHMARK(BM_AlternatingCycles)->Iterations(1)->Repetitions(3)->UseRealTime()->ReportAggregatesOnly(true);

const bool registered = [] {
  using lockon::bench::register_ratio;
  const std::string subject = "BM_AlternatingCycles";
  register_ratio({.label = "alternating blocks: client layer / raw floor (cycles/s)", .subject = subject,
                  .metric = "ratio_client_layer", .target = 0.95});
  register_ratio({.label = "alternating blocks: Lock / raw floor (cycles/s)", .subject = subject,
                  .metric = "ratio_lock", .target = 0.95});
  register_ratio({.label = "alternating blocks: Lock with fencing / raw floor (cycles/s)", .subject = subject,
                  .metric = "ratio_lock_fenced", .target = 0.90});
  register_ratio({.label = "alternating blocks: lock_on (3 args) / raw floor (cycles/s)", .subject = subject,
                  .metric = "ratio_lock_on", .target = 0.95});
  register_ratio({.label = "alternating blocks: decorated lock_on / raw floor (cycles/s)", .subject = subject,
                  .metric = "ratio_decorated", .target = 0.95});
  register_ratio({.label = "alternating blocks: raw floor on a lock_on-length key / raw floor (cycles/s)",
                  .subject = subject, .metric = "ratio_floor_lock_on_key", .informational = true});
  register_ratio({.label = "alternating blocks: lock_on / raw floor on a key of the same length (cycles/s)",
                  .subject = subject, .metric = "ratio_lock_on_vs_same_key_floor", .informational = true});
  register_ratio({.label = "alternating blocks: decorated / raw floor on a key of the same length (cycles/s)",
                  .subject = subject, .metric = "ratio_decorated_vs_same_key_floor", .informational = true});
  return true;
}();

}  // namespace
