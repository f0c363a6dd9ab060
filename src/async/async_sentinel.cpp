#include "async/async_sentinel.hpp"

#include <array>
#include <string>
#include <string_view>

#include "client/connection.hpp"
#include "client/error_map.hpp"
#include "client/sentinel_resolution.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

using Clock = std::chrono::steady_clock;

// One command on `connection`, bounded by `until`; nullptr if no answer in time.
asio::awaitable<ReplyPtr> ask(AsyncConnection& connection, std::span<const std::string_view> args,
                              std::string_view operation, Clock::time_point until) {
  std::string resp;
  append_resp(resp, args);
  auto outcome = co_await connection.exchange(std::move(resp), 1, until, operation);
  if (outcome.ended != AsyncConnection::Ended::replied) co_return nullptr;
  co_return std::move(outcome.replies[0]);
}

}  // namespace

asio::awaitable<bool> async_says_master(AsyncConnection& connection, Clock::time_point until) {
  try {
    const std::array<std::string_view, 1> role{"ROLE"};
    const ReplyPtr answer = co_await ask(connection, role, "ROLE", until);
    co_return role_is_master(answer.get());
  } catch (const Error&) {
    co_return false;
  }
}

namespace {

// The Asio port of resolve_master (client/sentinel_resolution.hpp): the
// connection that answered ROLE "master" becomes the client's.
struct AsioResolutionPort {
  template <class T>
  using Task = asio::awaitable<T>;
  using Master = std::shared_ptr<AsyncConnection>;

  Task<ReplyPtr> ask_sentinel(const ConnectionOptions& sentinel, Clock::time_point until) {
    auto connection = std::make_shared<AsyncConnection>(executor, sentinel, ServerRole::sentinel);
    const std::array<std::string_view, 3> question{"SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinel.master_name};
    ReplyPtr reply;
    try {
      reply = co_await ask(*connection, question, "SENTINEL GET-MASTER-ADDR-BY-NAME", until);
    } catch (...) {
      connection->close();
      throw;
    }
    connection->close();
    co_return reply;
  }
  Task<std::optional<Master>> master_if_role(const ConnectionOptions& master, Clock::time_point until) {
    auto probe = std::make_shared<AsyncConnection>(executor, master);
    bool is_master = false;
    try {
      const std::array<std::string_view, 1> role{"ROLE"};
      const ReplyPtr answer = co_await ask(*probe, role, "ROLE", until);
      is_master = role_is_master(answer.get());
    } catch (...) {
      probe->close();
      throw;
    }
    if (is_master) co_return probe;
    probe->close();
    co_return std::nullopt;
  }

  asio::any_io_executor executor;
};

}  // namespace

asio::awaitable<std::shared_ptr<AsyncConnection>> async_resolve_master(asio::any_io_executor executor,
                                                                       const ConnectionOptions& options,
                                                                       std::size_t& preferred,
                                                                       std::optional<NodeAddress> hint) {
  AsioResolutionPort port{std::move(executor)};
  auto resolved = co_await resolve_master(port, options, preferred, std::move(hint));
  if (resolved.sentinel) preferred = *resolved.sentinel;
  co_return std::move(resolved.master);
}

}  // namespace lockon::detail
