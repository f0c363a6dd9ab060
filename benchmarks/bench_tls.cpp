// TLS against plaintext, drift-proof: one redis-server listening on both a
// plaintext and a TLS port (certificates from tests/support/tls_certs), a
// Lock cycle over each in alternating blocks inside one measurement (issue
// 13: the TLS cycle must reach >= 0.85x the plaintext one, the pool
// amortizing handshakes), and the cost of a fresh connection: TCP connect +
// TLS handshake + HELLO, against TCP connect + HELLO, also alternating.
#include <benchmark/benchmark.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "bench_support.hpp"
#include "lockon/lockon.hpp"
#include "support/tls_certs.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBlock = 200;
constexpr int kRounds = 40;
constexpr int kConnectBlock = 20;
constexpr int kConnectRounds = 10;

lockon::test::TlsRedisServer& tls_server() {
  static lockon::test::TlsRedisServer server;  // the good certificate, no client certificates
  return server;
}

std::string tls_url() { return tls_server().url(); }  // rediss://...?cacert=<test CA>

std::string plain_url() { return "redis://127.0.0.1:" + std::to_string(tls_server().plain_port()); }

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void BM_TlsAlternatingCycles(benchmark::State& state) {
  const lockon::Client plain(plain_url());
  const lockon::Client tls(tls_url());
  lockon::Lock plain_lock(plain, "bench:tls:plain");
  lockon::Lock tls_lock(tls, "bench:tls:tls");
  const auto cycle = [](lockon::Lock& lock) {
    if (!lock.try_lock()) throw std::runtime_error("lock busy");
    lock.unlock();
  };
  cycle(plain_lock);  // warm: connections in the pools, scripts loaded
  cycle(tls_lock);
  double plain_seconds = 0;
  double tls_seconds = 0;
  for (auto _ : state) {
    for (int round = 0; round < kRounds; ++round) {
      auto start = Clock::now();
      for (int i = 0; i < kBlock; ++i) cycle(plain_lock);
      plain_seconds += seconds_since(start);
      start = Clock::now();
      for (int i = 0; i < kBlock; ++i) cycle(tls_lock);
      tls_seconds += seconds_since(start);
    }
  }
  const double cycles = static_cast<double>(state.iterations()) * kRounds * kBlock;
  state.counters["us_per_cycle_plain"] = 1e6 * plain_seconds / cycles;
  state.counters["us_per_cycle_tls"] = 1e6 * tls_seconds / cycles;
  state.counters["ratio_tls"] = plain_seconds / tls_seconds;  // cycles/s relative to plaintext
}

BENCHMARK(BM_TlsAlternatingCycles)->Iterations(1)->Repetitions(3)->UseRealTime()->ReportAggregatesOnly(true);

// A fresh Client's first command: connect (+ handshake) + HELLO + PING.
void BM_TlsFreshConnection(benchmark::State& state) {
  const auto plain_options = lockon::ConnectionOptions::from_url(plain_url());
  const auto tls_options = lockon::ConnectionOptions::from_url(tls_url());
  lockon::Client(tls_options).ping();  // builds the cached SSL_CTX (loads the CA file) once
  double plain_seconds = 0;
  double tls_seconds = 0;
  for (auto _ : state) {
    for (int round = 0; round < kConnectRounds; ++round) {
      auto start = Clock::now();
      for (int i = 0; i < kConnectBlock; ++i) lockon::Client(plain_options).ping();
      plain_seconds += seconds_since(start);
      start = Clock::now();
      for (int i = 0; i < kConnectBlock; ++i) lockon::Client(tls_options).ping();
      tls_seconds += seconds_since(start);
    }
  }
  const double connects = static_cast<double>(state.iterations()) * kConnectRounds * kConnectBlock;
  state.counters["us_connect_plain"] = 1e6 * plain_seconds / connects;
  state.counters["us_connect_tls"] = 1e6 * tls_seconds / connects;
  state.counters["us_handshake_cost"] = 1e6 * (tls_seconds - plain_seconds) / connects;
}

BENCHMARK(BM_TlsFreshConnection)->Iterations(1)->Repetitions(3)->UseRealTime()->ReportAggregatesOnly(true);

const bool registered = [] {
  using lockon::bench::register_ratio;
  register_ratio({.label = "alternating blocks: Lock cycle over TLS / plaintext (cycles/s)",
                  .subject = "BM_TlsAlternatingCycles", .metric = "ratio_tls", .target = 0.85});
  register_ratio({.label = "fresh connection + HELLO + PING over TLS (us; handshake cost in the table)",
                  .subject = "BM_TlsFreshConnection", .metric = "us_connect_tls", .informational = true});
  return true;
}();

}  // namespace
