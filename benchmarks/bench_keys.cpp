// Key derivation cost per call of a `lock_on`-wrapped function: encode the
// selected arguments, MD5 them, build the key string. The function digest is
// computed once per wrapper, so it is precomputed here too.
// Target: <= 1 us for three typical arguments.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lockon/encoding.hpp"
#include "lockon/key.hpp"
#include "lockon/md5.hpp"

namespace {

const std::string& bench_function_digest() {
  static const std::string digest = lockon::function_digest("bench::transfer");
  return digest;
}

void BM_LockKey_1Arg(benchmark::State& state) {
  const std::int64_t account = 1234567;
  for (auto _ : state) {
    std::string key = lockon::make_lock_key(lockon::kDefaultKeyPrefix, bench_function_digest(),
                                            lockon::encode_args(account));
    benchmark::DoNotOptimize(key);
  }
}
BENCHMARK(BM_LockKey_1Arg);

void BM_LockKey_3Args(benchmark::State& state) {
  const int tenant = 42;
  const std::string user = "user-1234567";
  const std::string currency = "EUR";
  for (auto _ : state) {
    std::string key = lockon::make_lock_key(lockon::kDefaultKeyPrefix, bench_function_digest(),
                                            lockon::encode_args(tenant, user, currency));
    benchmark::DoNotOptimize(key);
  }
}
BENCHMARK(BM_LockKey_3Args);

void BM_LockKey_8Args(benchmark::State& state) {
  const int tenant = 42;
  const std::string user = "user-1234567";
  const std::string currency = "EUR";
  const bool dry_run = false;
  const double amount = 199.95;
  const std::uint64_t request = 0xfeedfacecafebeefULL;
  const std::vector<int> shards = {1, 2, 3};
  const std::optional<std::string> note = "monthly";
  for (auto _ : state) {
    std::string key = lockon::make_lock_key(
        lockon::kDefaultKeyPrefix, bench_function_digest(),
        lockon::encode_args(tenant, user, currency, dry_run, amount, request, shards, note));
    benchmark::DoNotOptimize(key);
  }
}
BENCHMARK(BM_LockKey_8Args);

// The parts of the 3-argument case, to see where the time goes.
void BM_EncodeArgs_3Args(benchmark::State& state) {
  const int tenant = 42;
  const std::string user = "user-1234567";
  const std::string currency = "EUR";
  for (auto _ : state) {
    std::string bytes = lockon::encode_args(tenant, user, currency);
    benchmark::DoNotOptimize(bytes);
  }
}
BENCHMARK(BM_EncodeArgs_3Args);

void BM_Md5Hex_OpenSsl(benchmark::State& state) {
  const std::string data(static_cast<std::size_t>(state.range(0)), 'k');
  for (auto _ : state) {
    std::string hex = lockon::md5_hex(data);
    benchmark::DoNotOptimize(hex);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Md5Hex_OpenSsl)->Arg(50)->Arg(200);

// The constexpr implementation run at run time (the FIPS fallback).
void BM_Md5Hex_Portable(benchmark::State& state) {
  const std::string data(static_cast<std::size_t>(state.range(0)), 'k');
  for (auto _ : state) {
    std::array<char, 32> hex = lockon::md5_hex_ct(data);
    benchmark::DoNotOptimize(hex);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Md5Hex_Portable)->Arg(50)->Arg(200);

}  // namespace
