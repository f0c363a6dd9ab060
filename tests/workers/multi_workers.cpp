// workers/multi_workers.cpp — worker sub-commands for the MultiLock and
// lock_on_each tests (tests/integration/test_multi_lock.cpp,
// test_lock_on_each.cpp).
//
//   multi_hold URL TTL_MS KEY...
//       Takes a MultiLock over KEY... (ttl TTL_MS, renewed), prints
//       "acquired", then sleeps (the test SIGKILLs it).
//
//   multi_transfer URL PREFIX SECONDS REVERSED
//       For SECONDS, two threads call transfer(from, to, 1) locked with
//       lock_on_each<0, 1> (key prefix PREFIX) on the accounts PREFIX:a and
//       PREFIX:b — thread 0 a->b, thread 1 b->a, swapped when REVERSED is 1 —
//       and a third calls deposit(PREFIX:a, 1) locked with lock_on<0> in
//       KeyScope::entity (the same key as transfer's for that account).
//       Balances are non-atomic GET + SET. Every call must complete (a
//       lockon error makes the worker fail). Prints "transfers N" and
//       "deposits N".
#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lockon/lockon.hpp"
#include "support/worker_registry.hpp"

namespace {

int multi_usage(const char* text) {
  std::cerr << "usage: " << text << '\n';
  return 2;
}

long long balance_of(const lockon::Client& data, const std::string& account) {
  const lockon::Reply value = data.command({"GET", account});
  return value.is_nil() ? 0 : std::stoll(value.as_string());
}

}  // namespace

LOCKON_WORKER_COMMAND(multi_hold)(const std::vector<std::string>& args) -> int {
  if (args.size() < 3) return multi_usage("multi_hold URL TTL_MS KEY...");
  const lockon::Client client(args[0]);
  std::vector<std::string> keys(args.begin() + 2, args.end());
  lockon::MultiLock lock(client, keys, {.ttl = std::chrono::milliseconds(std::stoll(args[1]))});
  if (!lock.try_lock_for(std::chrono::seconds(10))) {
    std::cout << "busy" << std::endl;
    return 1;
  }
  std::cout << "acquired" << std::endl;
  std::this_thread::sleep_for(std::chrono::seconds(60));  // bounded "forever": the test kills us
  return 1;
}

LOCKON_WORKER_COMMAND(multi_transfer)(const std::vector<std::string>& args) -> int {
  if (args.size() != 4) return multi_usage("multi_transfer URL PREFIX SECONDS REVERSED");
  const std::string& url = args[0];
  const std::string& prefix = args[1];
  const auto run_for = std::chrono::seconds(std::stoll(args[2]));
  const bool reversed = args[3] == "1";
  const lockon::Client data(url, {.size = 5});
  // Every call must complete: a generous deadline, unlimited attempts.
  const lockon::RedisLocker locker(lockon::Client(url, {.size = 5}),
                                   {.max_retry = 0,
                                    .retry_delay = std::chrono::seconds(1),
                                    .timeout = std::chrono::seconds(20),
                                    .ttl = std::chrono::seconds(5),
                                    .key_prefix = prefix});
  data.ping();
  const auto transfer = locker.lock_on_each<0, 1>("bank::transfer", [&](const std::string& from,
                                                                          const std::string& to, long long amount) {
    const long long from_balance = balance_of(data, from);
    const long long to_balance = balance_of(data, to);
    std::this_thread::sleep_for(std::chrono::microseconds(300));  // widen the race window
    data.command({"SET", from, std::to_string(from_balance - amount)});
    data.command({"SET", to, std::to_string(to_balance + amount)});
  });
  const auto deposit = locker.lock_on<0>(
      "bank::deposit",
      [&](const std::string& account, long long amount) {
        const long long balance = balance_of(data, account);
        data.command({"SET", account, std::to_string(balance + amount)});
      },
      {.scope = lockon::KeyScope::entity});

  const std::string a = prefix + ":a";
  const std::string b = prefix + ":b";
  const auto end = std::chrono::steady_clock::now() + run_for;
  std::atomic<long long> transfers{0};
  std::atomic<long long> deposits{0};
  std::mutex error_mutex;
  std::string first_error;
  auto guarded = [&](auto&& body) {
    try {
      body();
    } catch (const std::exception& e) {
      const std::lock_guard guard(error_mutex);
      if (first_error.empty()) first_error = e.what();
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    const bool a_to_b = (t == 0) != reversed;
    threads.emplace_back([&, a_to_b] {
      guarded([&] {
        while (std::chrono::steady_clock::now() < end) {
          if (a_to_b) transfer(a, b, 1);
          else transfer(b, a, 1);
          transfers.fetch_add(1);
        }
      });
    });
  }
  threads.emplace_back([&] {
    guarded([&] {
      while (std::chrono::steady_clock::now() < end) {
        deposit(a, 1);
        deposits.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  });
  for (auto& thread : threads) thread.join();
  std::cout << "transfers " << transfers.load() << "\ndeposits " << deposits.load() << std::endl;
  if (!first_error.empty()) {
    std::cerr << "error: " << first_error << '\n';
    return 1;
  }
  return 0;
}

// multi_bank URL A B ROUNDS ORDER
//   ROUNDS times: a MultiLock over {A, B} (listed A,B when ORDER is "ab",
//   B,A otherwise), then moves an amount between "<A>:balance" and
//   "<B>:balance" and bumps the "<A>:ops" counter, all as non-atomic GET + SET (only the lock
//   makes them exact). Prints "done N" (test_multi_lock_script.cpp).
LOCKON_WORKER_COMMAND(multi_bank)(const std::vector<std::string>& args) -> int {
  if (args.size() != 5) return multi_usage("multi_bank URL A B ROUNDS ORDER");
  const lockon::Client client(args[0]);
  const std::string& a = args[1];
  const std::string& b = args[2];
  const std::string ops = a + ":ops";
  const long long rounds = std::stoll(args[3]);
  lockon::MultiLock both(client, args[4] == "ab" ? std::vector<std::string>{a, b} : std::vector<std::string>{b, a},
                         {.ttl = std::chrono::seconds(5)});
  long long done = 0;
  for (long long i = 0; i < rounds; ++i) {
    if (!both.try_lock_for(std::chrono::seconds(20))) break;
    const long long amount = 1 + i % 7;
    const std::string from = (i % 2 == 0 ? a : b) + ":balance";
    const std::string to = (i % 2 == 0 ? b : a) + ":balance";
    const long long from_balance = balance_of(client, from);
    const long long to_balance = balance_of(client, to);
    client.command({"SET", from, std::to_string(from_balance - amount)});
    client.command({"SET", to, std::to_string(to_balance + amount)});
    client.command({"SET", ops, std::to_string(balance_of(client, ops) + 1)});
    both.release();
    ++done;
  }
  std::cout << "done " << done << std::endl;
  return done == rounds ? 0 : 1;
}
