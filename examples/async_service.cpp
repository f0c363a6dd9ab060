// async_service — a small TCP service on Asio whose withdrawal handler runs
// under AsyncLocker::async_lock_on, keyed by the account: one thread, one
// io_context, any number of concurrent clients, no thread per waiting lock.
//
//   async_service [--port N] [--url URL]      (default: LOCKON_REDIS_URL or
//                                              redis://127.0.0.1:6379)
//
// Line protocol, one request per line:
//   DEPOSIT <account> <amount>    -> "OK <balance>"
//   WITHDRAW <account> <amount>   -> "OK <balance>" or "INSUFFICIENT <balance>"
//   BALANCE <account>             -> "OK <balance>"
// The balance lives in Redis under "bank:<account>" and each operation is a
// deliberately non-atomic GET / check / SET: only the lock keeps it exact
// (scripts/async_demo.sh shows it under concurrent clients).
#include <lockon/async.hpp>

#include <asio/buffer.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read_until.hpp>
#include <asio/signal_set.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

using asio::ip::tcp;

struct Bank {
  lockon::AsyncClient client;
  lockon::AsyncLocker locker;

  asio::awaitable<long long> balance(const std::string& account) {
    std::vector<std::string> get{"GET", "bank:" + account};
    const lockon::Reply value = co_await client.async_command(get);
    co_return value.is_nil() ? 0 : std::stoll(value.as_string());
  }
  asio::awaitable<void> store(const std::string& account, long long amount) {
    std::vector<std::string> set{"SET", "bank:" + account, std::to_string(amount)};
    co_await client.async_command(set);
  }
};

// Runs one connection: reads lines, answers each.
asio::awaitable<void> serve(tcp::socket socket, Bank& bank) {
  // Withdrawal and deposit lock on argument 0 (the account): operations on
  // one account run one at a time across every process, others in parallel.
  auto withdraw = bank.locker.async_lock_on<0>(
      "bank::withdraw", [&bank](std::string account, long long amount) -> asio::awaitable<std::string> {
        const long long current = co_await bank.balance(account);
        if (current < amount) co_return "INSUFFICIENT " + std::to_string(current);
        co_await bank.store(account, current - amount);
        co_return "OK " + std::to_string(current - amount);
      },
      {.scope = lockon::KeyScope::entity});
  auto deposit = bank.locker.async_lock_on<0>(
      "bank::deposit", [&bank](std::string account, long long amount) -> asio::awaitable<std::string> {
        const long long current = co_await bank.balance(account);
        co_await bank.store(account, current + amount);
        co_return "OK " + std::to_string(current + amount);
      },
      {.scope = lockon::KeyScope::entity});
  std::string buffer;
  try {
    while (true) {
      const std::size_t n = co_await asio::async_read_until(socket, asio::dynamic_buffer(buffer), '\n',
                                                            asio::use_awaitable);
      std::istringstream line(buffer.substr(0, n));
      buffer.erase(0, n);
      std::string verb;
      std::string account;
      long long amount = 0;
      line >> verb >> account >> amount;
      std::string answer;
      try {
        if (verb == "WITHDRAW" && amount > 0) answer = co_await withdraw(account, amount);
        else if (verb == "DEPOSIT" && amount > 0) answer = co_await deposit(account, amount);
        else if (verb == "BALANCE" && !account.empty()) answer = "OK " + std::to_string(co_await bank.balance(account));
        else answer = "ERROR bad request";
      } catch (const lockon::Error& e) {
        answer = std::string("ERROR ") + e.what();
      }
      answer.push_back('\n');
      co_await asio::async_write(socket, asio::buffer(answer), asio::use_awaitable);
    }
  } catch (const std::exception&) {
    // The client went away.
  }
}

asio::awaitable<void> listen(tcp::acceptor& acceptor, Bank& bank) {
  while (true) {
    tcp::socket socket = co_await acceptor.async_accept(asio::use_awaitable);
    socket.set_option(tcp::no_delay(true));
    asio::co_spawn(acceptor.get_executor(), serve(std::move(socket), bank), asio::detached);
  }
}

}  // namespace

int main(int argc, char** argv) {
  unsigned short port = 7070;
  const char* env_url = std::getenv("LOCKON_REDIS_URL");
  std::string url = env_url != nullptr ? env_url : "redis://127.0.0.1:6379";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--port") == 0 && i + 1 < argc) port = static_cast<unsigned short>(std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--url") == 0 && i + 1 < argc) url = argv[++i];
    else {
      std::fprintf(stderr, "usage: async_service [--port N] [--url URL]\n");
      return 2;
    }
  }
  try {
    asio::io_context io;
    lockon::AsyncClient client(io.get_executor(), url);
    Bank bank{client, lockon::AsyncLocker(client, {.timeout = std::chrono::seconds(30)})};
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const asio::error_code&, int) { io.stop(); });
    asio::co_spawn(io, listen(acceptor, bank), asio::detached);
    std::printf("async_service: listening on 127.0.0.1:%u (Redis %s)\n", port, bank.client.endpoint().c_str());
    std::fflush(stdout);
    io.run();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "async_service: %s\n", e.what());
    return 1;
  }
}
