#include "servers.hpp"

#include <cstdlib>
#include <sstream>
#include <utility>

#include "lockon/errors.hpp"

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

namespace {

/// The --cacert & co. flags over the URL's own TLS query parameters.
void apply_tls_flags(const ServerOptions& flags, ConnectionOptions& options) {
  const bool any = !flags.cacert.empty() || !flags.cacertdir.empty() || !flags.cert.empty() || !flags.key.empty() ||
                   !flags.sni.empty() || flags.insecure;
  if (!any) return;
  if (!options.tls.enabled)
    throw ConfigError("--cacert, --cacertdir, --cert, --key, --sni and --insecure need a rediss:// URL (" +
                      options.endpoint() + " is plaintext)");
  if (!flags.cacert.empty()) options.tls.cacert = flags.cacert;
  if (!flags.cacertdir.empty()) options.tls.cacertdir = flags.cacertdir;
  if (!flags.cert.empty()) options.tls.cert = flags.cert;
  if (!flags.key.empty()) options.tls.key = flags.key;
  if (!flags.sni.empty()) options.tls.sni = flags.sni;
  if (flags.insecure) options.tls.insecure = true;
}

}  // namespace

Servers::Servers(const ServerOptions& options, Reporter& reporter) : urls_(resolve_urls(options)) {
  for (const auto& url : urls_) {
    // from_url's messages never contain the password; it throws ConfigError.
    ConnectionOptions parsed = ConnectionOptions::from_url(url);
    reporter.redactor().add_password(parsed.password);
    apply_tls_flags(options, parsed);
    endpoints_.push_back(parsed.endpoint());
    options_.push_back(std::move(parsed));
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
  clients.reserve(options_.size());
  for (const auto& options : options_) clients.emplace_back(options);
  return clients;
}

std::unique_ptr<DistributedLock> Servers::make_lock(const std::string& name, LockOptions options,
                                                    RedlockOptions redlock) const {
  if (urls_.size() == 1) return std::make_unique<Lock>(clients().front(), name, std::move(options));
  return std::make_unique<Redlock>(clients(), name, std::move(options), std::move(redlock));
}

}  // namespace lockon::cli
