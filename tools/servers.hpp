// tools/servers.hpp — turning --url values into lockon clients and locks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli_options.hpp"
#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "lockon/options.hpp"
#include "lockon/redlock.hpp"
#include "report.hpp"

namespace lockon::cli {

/// The servers a command talks to: one (a plain Lock) or several (Redlock).
class Servers {
 public:
  /// Parses every URL (ConfigError for a bad one, or for TLS flags with a
  /// plain redis:// URL), applies the TLS flags and registers the passwords
  /// with the reporter's redactor. Connects to nothing.
  Servers(const ServerOptions& options, Reporter& reporter);

  const std::vector<std::string>& urls() const noexcept { return urls_; }
  std::size_t size() const noexcept { return urls_.size(); }
  /// "host:port" of node i.
  const std::string& endpoint(std::size_t i) const { return endpoints_[i]; }
  /// "127.0.0.1:6379", or "3 nodes (a:1, b:2, c:3)" — never credentials.
  std::string describe() const;

  /// One client per server, in --url order.
  std::vector<Client> clients() const;

  /// A Lock on the only server, or a Redlock over all of them.
  std::unique_ptr<DistributedLock> make_lock(const std::string& name, LockOptions options,
                                             RedlockOptions redlock = {}) const;

 private:
  std::vector<std::string> urls_;
  std::vector<ConnectionOptions> options_;  // parsed URLs with the TLS flags applied
  std::vector<std::string> endpoints_;
};

}  // namespace lockon::cli
