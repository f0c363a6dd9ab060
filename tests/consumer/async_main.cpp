// A downstream program built against an installed lockon's async component
// (find_package(lockon COMPONENTS async); see check.cmake). No server: it
// checks that the header, Asio and the library link and behave.
#include <asio/io_context.hpp>

#include <iostream>
#include <string>

#include <lockon/async.hpp>

// Compiled, not run (no server): the natural spelling of a command inside
// co_await, which GCC 12 rejected with async_command(std::vector<std::string>)
// ("array used as initializer", issue 35 §12). Built by every compiler the
// consumer check uses (GCC, and clang when installed).
asio::awaitable<std::string> braced_commands(const lockon::AsyncClient& client, std::string key) {
  co_await client.async_command({"SET", key, "v"});
  co_await client.async_command({"PING"});
  const lockon::Reply reply = co_await client.async_command({"GET", key});
  co_return reply.is_nil() ? std::string() : reply.as_string();
}

int main() {
  asio::io_context io;
  try {
    lockon::AsyncClient client(io.get_executor(), "redis://127.0.0.1:6379/2");
    lockon::AsyncLock lock(client, "consumer:lock");
    if (client.endpoint() != "127.0.0.1:6379" || lock.held()) {
      std::cerr << "async consumer: unexpected state for " << client.endpoint() << '\n';
      return 1;
    }
    try {
      lockon::AsyncLock bad(client, "");
      std::cerr << "async consumer: an empty lock name was accepted\n";
      return 1;
    } catch (const lockon::ConfigError&) {
    }
    std::cout << "async consumer: lockon::async made a client for " << client.endpoint() << '\n';
    return 0;
  } catch (const lockon::Error& error) {
    std::cerr << "async consumer: lockon::Error: " << error.what() << '\n';
    return 1;
  }
}
