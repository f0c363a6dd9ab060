#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/steady_timer.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>

#include "async/async_client_impl.hpp"
#include "client/client_impl.hpp"
#include "client/error_map.hpp"
#include "lock/lock_scripts.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {

AsyncClientImpl::AsyncClientImpl(asio::any_io_executor executor, ConnectionOptions options,
                                 AsyncClientOptions limits)
    : executor_(std::move(executor)),
      options_(std::move(options)),
      limits_(limits),
      endpoint_(options_.endpoint()) {
  validate(options_);
  if (options_.deployment != Deployment::standalone)
    throw ConfigError("lockon's async client supports standalone servers only for now, not " + endpoint_);
  if (options_.tls.enabled) throw ConfigError("lockon's async client does not support TLS yet (" + endpoint_ + ")");
  if (limits_.reconnect_delay.count() <= 0) throw ConfigError("AsyncClientOptions::reconnect_delay must be > 0");
  connection_ = std::make_shared<AsyncConnection>(executor_, options_);
}

AsyncClientImpl::~AsyncClientImpl() { close(); }

void AsyncClientImpl::close() noexcept {
  connection_->close();
  if (subscriber_) {
    // Waiting locks keep the old one (they poll now); a later wait makes a new one.
    subscriber_->close();
    subscriber_.reset();
  }
}

AsyncSubscriber& AsyncClientImpl::subscriber() {
  if (!subscriber_) subscriber_ = std::make_shared<AsyncSubscriber>(executor_, options_, limits_.reconnect_delay);
  return *subscriber_;
}

asio::awaitable<AsyncClientImpl::Answer> AsyncClientImpl::command(std::span<const std::string_view> args,
                                                                  std::string_view operation,
                                                                  Clock::time_point until) {
  std::string resp;
  append_resp(resp, args);
  auto outcome = co_await connection_->exchange(std::move(resp), 1, until, operation);
  if (outcome.ended != Ended::replied) co_return Answer{outcome.ended, nullptr};
  check_reply(*outcome.replies[0], endpoint_, operation);
  co_return Answer{Ended::replied, std::move(outcome.replies[0])};
}

asio::awaitable<AsyncClientImpl::Answer> AsyncClientImpl::script(const Script& script,
                                                                 std::span<const std::string_view> keys,
                                                                 std::span<const std::string_view> args,
                                                                 std::string_view operation,
                                                                 Clock::time_point until) {
  for (const bool by_sha : {true, false}) {
    std::string resp;
    append_script(resp, script, by_sha, keys, args);
    auto outcome = co_await connection_->exchange(std::move(resp), 1, until, operation);
    if (outcome.ended != Ended::replied) co_return Answer{outcome.ended, nullptr};
    ReplyPtr reply = std::move(outcome.replies[0]);
    // NOSCRIPT (first use, restart): nothing ran; send the body.
    if (by_sha && is_noscript(*reply)) continue;
    check_reply(*reply, endpoint_, operation);
    co_return Answer{Ended::replied, std::move(reply)};
  }
  throw ProtocolError(std::string(operation) + " on " + endpoint_ + ": NOSCRIPT after EVAL");
}

asio::awaitable<AsyncConnection::Outcome> AsyncClientImpl::pipeline(
    std::span<const std::span<const std::string_view>> commands, std::string_view operation,
    Clock::time_point until) {
  std::string resp;
  for (const auto& command : commands) append_resp(resp, command);
  co_return co_await connection_->exchange(std::move(resp), commands.size(), until, operation);
}

namespace {

asio::awaitable<void> clean_up(std::shared_ptr<AsyncClientImpl> client, std::array<std::string, 4> keys,
                               std::string entry) {
  asio::steady_timer timer(client->executor());
  auto delay = std::chrono::milliseconds(100);
  const std::array<std::string_view, 4> key_views{keys[0], keys[1], keys[2], keys[3]};
  const std::array<std::string_view, 1> args{entry};
  for (int attempt = 0; attempt < 12; ++attempt) {
    try {
      const auto socket_timeout = client->options().socket_timeout.count() > 0
                                      ? client->options().socket_timeout
                                      : std::chrono::milliseconds(5000);
      auto answer = co_await client->script(scripts::cancel_wait(), key_views, args, "cancel wait",
                                            std::chrono::steady_clock::now() + socket_timeout);
      if (answer.ended == AsyncConnection::Ended::replied) co_return;
    } catch (...) {
    }
    timer.expires_after(delay);
    co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    delay = std::min(delay * 2, std::chrono::milliseconds(3000));
  }
}

}  // namespace

void AsyncClientImpl::abandon(std::array<std::string, 4> keys, std::string entry) noexcept {
  try {
    asio::co_spawn(executor_, clean_up(shared_from_this(), std::move(keys), std::move(entry)), asio::detached);
  } catch (...) {
  }
}

}  // namespace lockon::detail

namespace lockon {

AsyncClient::AsyncClient(executor_type executor, std::string_view url, AsyncClientOptions options)
    : AsyncClient(std::move(executor), ConnectionOptions::from_url(url), options) {}

AsyncClient::AsyncClient(executor_type executor, ConnectionOptions connection, AsyncClientOptions options)
    : impl_(std::make_shared<detail::AsyncClientImpl>(std::move(executor), std::move(connection), options)) {}

const AsyncClient::executor_type& AsyncClient::get_executor() const noexcept { return impl_->executor(); }
const ConnectionOptions& AsyncClient::options() const noexcept { return impl_->options(); }
const std::string& AsyncClient::endpoint() const noexcept { return impl_->endpoint(); }
void AsyncClient::close() noexcept { impl_->close(); }

asio::awaitable<Reply> AsyncClient::command_op(std::shared_ptr<detail::AsyncClientImpl> impl,
                                               std::vector<std::string> args) {
  if (args.empty()) throw ConfigError("async_command: no arguments");
  std::vector<std::string_view> views(args.begin(), args.end());
  const std::string operation = args[0];
  auto answer = co_await impl->command(views, operation, std::chrono::steady_clock::time_point::max());
  if (answer.ended != detail::AsyncConnection::Ended::replied)
    throw asio::system_error(asio::error::operation_aborted);
  co_return detail::to_reply(*answer.reply, impl->endpoint(), operation);
}

}  // namespace lockon
