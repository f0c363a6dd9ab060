// A downstream program built against an installed lockon (see check.cmake).
#include <iostream>

#include <lockon/client.hpp>
#include <lockon/errors.hpp>
#include <lockon/lock.hpp>
#include <lockon/options.hpp>

// check.cmake builds this file once more with `-std=c++23` before
// pkg-config's flags: the .pc must not set a -std that overrides it.
#ifdef LOCKON_CONSUMER_EXPECT_CXX23
static_assert(__cplusplus > 202002L, "lockon.pc's Cflags overrode the consumer's -std=c++23");
#endif

int main() {
  try {
    const auto options = lockon::ConnectionOptions::from_url("redis://127.0.0.1:6379/2");
    if (options.host != "127.0.0.1" || options.port != 6379 || options.db != 2) {
      std::cerr << "consumer: unexpected parse of redis://127.0.0.1:6379/2: host=" << options.host
                << " port=" << options.port << " db=" << options.db << '\n';
      return 1;
    }
    // A Client and a Lock (no I/O until used): links the code that needs
    // hiredis and OpenSSL, which `pkg-config --libs lockon` must name.
    const lockon::Client client(options);
    const lockon::Lock lock(client, "consumer:lock");
    if (lock.held()) {
      std::cerr << "consumer: a new Lock says it is held\n";
      return 1;
    }
    std::cout << "consumer: lockon parsed " << options.endpoint() << " db " << options.db << '\n';
    return 0;
  } catch (const lockon::Error& error) {
    std::cerr << "consumer: lockon::Error: " << error.what() << '\n';
    return 1;
  }
}
