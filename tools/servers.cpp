#include "servers.hpp"

#include <cstdlib>
#include <sstream>
#include <utility>

namespace lockon::cli {

std::vector<std::string> resolve_urls(const ServerOptions& options) {
  if (!options.urls.empty()) return options.urls;
  std::vector<std::string> urls;
  if (const char* env = std::getenv(kUrlEnvironmentVariable); env != nullptr) {
    std::istringstream words(env);
    for (std::string url; words >> url;) urls.push_back(url);
  }
  if (urls.empty()) urls.emplace_back(kDefaultUrl);
  return urls;
}

Servers::Servers(const ServerOptions& options, Reporter& reporter) : urls_(resolve_urls(options)) {
  for (const auto& url : urls_) {
    // from_url's messages never contain the password; it throws ConfigError.
    const ConnectionOptions parsed = ConnectionOptions::from_url(url);
    reporter.redactor().add_password(parsed.password);
    endpoints_.push_back(parsed.endpoint());
  }
}

std::string Servers::describe() const {
  if (endpoints_.size() == 1) return endpoints_.front();
  std::string text = std::to_string(endpoints_.size()) + " nodes (";
  for (std::size_t i = 0; i < endpoints_.size(); ++i) {
    if (i > 0) text += ", ";
    text += endpoints_[i];
  }
  return text + ")";
}

std::vector<Client> Servers::clients() const {
  std::vector<Client> clients;
  clients.reserve(urls_.size());
  for (const auto& url : urls_) clients.emplace_back(url);
  return clients;
}

std::unique_ptr<DistributedLock> Servers::make_lock(const std::string& name, LockOptions options,
                                                    RedlockOptions redlock) const {
  if (urls_.size() == 1) return std::make_unique<Lock>(clients().front(), name, std::move(options));
  return std::make_unique<Redlock>(clients(), name, std::move(options), std::move(redlock));
}

}  // namespace lockon::cli
