// withdraw — lockon's demo: several processes withdraw from a few shared
// accounts at once, each withdrawal a deliberately non-atomic
// read-check-write in Redis, guarded by lock_on keyed by the account id.
//
//   withdraw [--workers N] [--accounts N] [--ops N] [--no-lock] [--url URL]
//
// Without --url (or LOCKON_REDIS_URL) it starts a throwaway redis-server on a
// free loopback port and stops it at the end. With --no-lock the same code
// runs unguarded, to show the lost updates and overdrafts the lock prevents.
#include <lockon/lockon.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "demo_server.hpp"

using namespace std::chrono_literals;

namespace {

struct Settings {
  int workers = 4;
  int accounts = 5;
  int ops_per_worker = 400;
  long long initial_balance = 2'000;
  bool use_lock = true;
  std::string url;
  int worker_index = -1;  // >= 0 in a worker process
};

std::string balance_key(int account) { return "demo:account:" + std::to_string(account) + ":balance"; }
std::string ledger_key(int account) { return "demo:account:" + std::to_string(account) + ":paid"; }
const std::string kProgressKey = "demo:progress";

// The critical section: read, check, (think), write. Between the GET and the
// SET another withdrawal of the same account could slip in — unless the
// whole function runs under the account's lock.
bool withdraw(const lockon::Client& redis, int account, long long amount) {
  const lockon::Reply balance = redis.command({"GET", balance_key(account)});
  const long long current = std::stoll(balance.as_string());
  if (current < amount) return false;  // declined: insufficient funds
  std::this_thread::sleep_for(200us);  // fraud check, audit log, ...
  redis.command({"SET", balance_key(account), std::to_string(current - amount)});
  // The money actually paid out: an atomic append, so it is always right.
  redis.command({"INCRBY", ledger_key(account), std::to_string(amount)});
  return true;
}

int run_worker(const Settings& s) {
  const lockon::Client redis(s.url);
  const lockon::RedisLocker locker(redis, {.max_retry = 0, .retry_delay = 1s, .timeout = 10s, .ttl = 10s});
  // One withdrawal at a time per account, across every process.
  auto locked_withdraw = locker.lock_on<1>("demo::withdraw", &withdraw);
  std::mt19937 random(static_cast<unsigned>(s.worker_index) * 7919u + 17u);
  std::uniform_int_distribution<int> pick_account(0, s.accounts - 1);
  std::uniform_int_distribution<long long> pick_amount(1, 50);
  for (int op = 0; op < s.ops_per_worker; ++op) {
    const int account = pick_account(random);
    const long long amount = pick_amount(random);
    if (s.use_lock) locked_withdraw(redis, account, amount);
    else withdraw(redis, account, amount);
    redis.command({"INCR", kProgressKey});
  }
  return 0;
}

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--workers") s.workers = std::stoi(value());
    else if (arg == "--accounts") s.accounts = std::stoi(value());
    else if (arg == "--ops") s.ops_per_worker = std::stoi(value());
    else if (arg == "--no-lock") s.use_lock = false;
    else if (arg == "--url") s.url = value();
    else if (arg == "--worker") s.worker_index = std::stoi(value());
    else if (arg == "--help" || arg == "-h") {
      std::puts(
          "withdraw [--workers N=4] [--accounts N=5] [--ops N=400 per worker] [--no-lock] [--url URL]\n"
          "Concurrent withdrawals from shared accounts, guarded by lockon's lock_on.\n"
          "Uses --url, else $LOCKON_REDIS_URL, else starts a throwaway redis-server.");
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown argument '" + arg + "' (try --help)");
    }
  }
  if (s.workers < 1 || s.workers > 64 || s.accounts < 1 || s.accounts > 1000 || s.ops_per_worker < 1)
    throw std::invalid_argument("workers 1..64, accounts 1..1000, ops >= 1");
  return s;
}

pid_t spawn_worker(const Settings& s, int index) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    std::vector<std::string> args{"withdraw", "--worker", std::to_string(index), "--url", s.url,
                                  "--accounts", std::to_string(s.accounts), "--ops", std::to_string(s.ops_per_worker)};
    if (!s.use_lock) args.emplace_back("--no-lock");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  return pid;
}

long long get_number(const lockon::Client& redis, const std::string& key) {
  const lockon::Reply reply = redis.command({"GET", key});
  return reply.is_nil() ? 0 : std::stoll(reply.as_string());
}

int run_demo(Settings s) {
  std::optional<demo::ThrowawayServer> server;
  if (s.url.empty()) {
    if (const char* env = std::getenv("LOCKON_REDIS_URL"); env != nullptr && *env != '\0') {
      s.url = env;
    } else {
      server.emplace();
      s.url = server->url();
      std::printf("Started a throwaway redis-server on %s (pid %d).\n", server->endpoint().c_str(),
                  static_cast<int>(server->pid()));
    }
  }
  const lockon::Client redis(s.url);
  redis.ping();
  std::printf("Redis at %s. %d workers x %d withdrawals over %d accounts of %lld each, %s.\n\n",
              redis.endpoint().c_str(), s.workers, s.ops_per_worker, s.accounts, s.initial_balance,
              s.use_lock ? "guarded by lock_on<account>" : "WITHOUT a lock (--no-lock)");
  redis.command({"DEL", kProgressKey});
  for (int a = 0; a < s.accounts; ++a) {
    redis.command({"SET", balance_key(a), std::to_string(s.initial_balance)});
    redis.command({"DEL", ledger_key(a)});
  }

  const auto started = std::chrono::steady_clock::now();
  std::vector<pid_t> workers;
  for (int w = 0; w < s.workers; ++w) workers.push_back(spawn_worker(s, w));
  const long long total_ops = static_cast<long long>(s.workers) * s.ops_per_worker;
  int running = s.workers;
  int failures = 0;
  // On a terminal the progress line updates in place; in a log, one line a second.
  const bool terminal = isatty(STDOUT_FILENO) == 1;
  auto last_line = std::chrono::steady_clock::now();
  while (running > 0) {
    int status = 0;
    const pid_t done = waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      --running;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
      continue;
    }
    if (terminal) {
      std::printf("\r  progress: %lld / %lld withdrawals", get_number(redis, kProgressKey), total_ops);
      std::fflush(stdout);
    } else if (std::chrono::steady_clock::now() - last_line >= 1s) {
      std::printf("  progress: %lld / %lld withdrawals\n", get_number(redis, kProgressKey), total_ops);
      last_line = std::chrono::steady_clock::now();
    }
    std::this_thread::sleep_for(100ms);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("%s  progress: %lld / %lld withdrawals\n\n", terminal ? "\r" : "", get_number(redis, kProgressKey),
              total_ops);

  std::printf("  account   initial   paid out     final   expected   lost updates   overdraft\n");
  long long total_lost = 0;
  long long overdrafts = 0;
  for (int a = 0; a < s.accounts; ++a) {
    const long long paid = get_number(redis, ledger_key(a));
    const long long final_balance = get_number(redis, balance_key(a));
    const long long expected = s.initial_balance - paid;
    const long long lost = final_balance - expected;  // money that reappeared: a double spend
    const long long overdraft = paid > s.initial_balance ? paid - s.initial_balance : 0;
    total_lost += lost != 0 ? 1 : 0;
    overdrafts += overdraft > 0 ? 1 : 0;
    std::printf("  %7d %9lld %10lld %9lld %10lld %14lld %11lld\n", a, s.initial_balance, paid, final_balance,
                expected, lost, overdraft);
  }
  std::printf("\n  %lld withdrawals in %.2f s: %.0f withdrawals/s\n", total_ops, seconds,
              static_cast<double>(total_ops) / seconds);
  std::printf("  accounts with lost updates (double spends): %lld, overdrawn accounts: %lld, failed workers: %d\n",
              total_lost, overdrafts, failures);
  const bool correct = total_lost == 0 && overdrafts == 0 && failures == 0;
  if (s.use_lock) {
    std::printf("  %s\n", correct ? "OK: every balance equals its initial amount minus what was paid out."
                                  : "ERROR: the lock did not protect the accounts.");
    return correct ? 0 : 1;
  }
  std::printf("  %s\n", correct ? "(no corruption this time; the race is real but timing-dependent: run again)"
                                : "Without the lock, concurrent read-check-write loses updates: that is the bug "
                                  "lock_on prevents.");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Settings s = parse(argc, argv);
    if (s.worker_index >= 0) return run_worker(s);
    return run_demo(std::move(s));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "withdraw: %s\n", e.what());
    return 2;
  }
}
