// A downstream program built against an installed lockon (see check.cmake).
#include <iostream>

#include <lockon/errors.hpp>
#include <lockon/options.hpp>

int main() {
  try {
    const auto options = lockon::ConnectionOptions::from_url("redis://127.0.0.1:6379/2");
    if (options.host != "127.0.0.1" || options.port != 6379 || options.db != 2) {
      std::cerr << "consumer: unexpected parse of redis://127.0.0.1:6379/2: host=" << options.host
                << " port=" << options.port << " db=" << options.db << '\n';
      return 1;
    }
    std::cout << "consumer: lockon parsed " << options.endpoint() << " db " << options.db << '\n';
    return 0;
  } catch (const lockon::Error& error) {
    std::cerr << "consumer: lockon::Error: " << error.what() << '\n';
    return 1;
  }
}
