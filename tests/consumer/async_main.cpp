// A downstream program built against an installed lockon's async component
// (find_package(lockon COMPONENTS async); see check.cmake). No server: it
// checks that the header, Asio and the library link and behave.
#include <asio/io_context.hpp>

#include <iostream>

#include <lockon/async.hpp>

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
