#include "async/async_sentinel.hpp"

#include <array>
#include <string>
#include <string_view>

#include "client/connection.hpp"
#include "client/error_map.hpp"
#include "client/sentinel_topology.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

using Clock = std::chrono::steady_clock;

std::string_view text_of(const redisReply& reply) {
  if (reply.type == REDIS_REPLY_STRING || reply.type == REDIS_REPLY_STATUS || reply.type == REDIS_REPLY_ERROR)
    return {reply.str, reply.len};
  return {};
}

// One command on `connection`, bounded by `until`; nullptr if no answer in time.
asio::awaitable<ReplyPtr> ask(AsyncConnection& connection, std::span<const std::string_view> args,
                              std::string_view operation, Clock::time_point until) {
  std::string resp;
  append_resp(resp, args);
  auto outcome = co_await connection.exchange(std::move(resp), 1, until, operation);
  if (outcome.ended != AsyncConnection::Ended::replied) co_return nullptr;
  co_return std::move(outcome.replies[0]);
}

std::chrono::milliseconds or_default(std::chrono::milliseconds value) {
  return value.count() > 0 ? value : std::chrono::milliseconds(5000);
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

bool is_readonly_reply(const redisReply& reply) noexcept {
  return reply.type == REDIS_REPLY_ERROR && text_of(reply).starts_with("READONLY");
}

asio::awaitable<std::shared_ptr<AsyncConnection>> async_resolve_master(asio::any_io_executor executor,
                                                                       const ConnectionOptions& options,
                                                                       std::size_t& preferred,
                                                                       std::optional<NodeAddress> hint) {
  const auto sentinels = sentinels_of(options);
  const auto step = or_default(options.connect_timeout) + or_default(options.socket_timeout);
  const auto budget = 2 * step + std::chrono::milliseconds(100);
  const auto give_up_at = Clock::now() + budget;
  const std::size_t first = preferred;
  std::string tried;
  NodeFailures failed;
  bool unknown_everywhere = true;
  if (hint) {
    // Failover news named it: no sentinel's answer can be newer. Its
    // failure decides nothing (the sentinels are asked next, the news's
    // sender first), so it is only listed.
    const ConnectionOptions master = master_options(options, hint->host, hint->port);
    auto probe = std::make_shared<AsyncConnection>(executor, master);
    std::string problem;
    try {
      const std::array<std::string_view, 1> role{"ROLE"};
      const ReplyPtr answer = co_await ask(*probe, role, "ROLE", Clock::now() + step);
      if (role_is_master(answer.get())) co_return probe;
      problem = "which is not a master (ROLE)";
    } catch (const Error& e) {
      problem = e.what();
    }
    probe->close();
    tried += "; failover news named " + master.endpoint() + ", " + problem;
  }
  for (std::size_t i = 0; i < sentinels.size(); ++i) {
    if (i > 0 && Clock::now() >= give_up_at) {
      tried += "; resolution budget of " + std::to_string(budget.count()) + " ms spent";
      failed.add_unclassified();  // the sentinels left untried might have answered
      break;
    }
    const std::size_t index = (first + i) % sentinels.size();
    const ConnectionOptions sentinel_opts = sentinel_options(options, sentinels[index]);
    const std::string where = sentinel_opts.endpoint();
    auto sentinel = std::make_shared<AsyncConnection>(executor, sentinel_opts, ServerRole::sentinel);
    std::shared_ptr<AsyncConnection> probe;
    try {
      const std::array<std::string_view, 3> question{"SENTINEL", "GET-MASTER-ADDR-BY-NAME", options.master_name};
      const ReplyPtr reply =
          co_await ask(*sentinel, question, "SENTINEL GET-MASTER-ADDR-BY-NAME", Clock::now() + step);
      sentinel->close();
      if (!reply) {
        unknown_everywhere = false;
        tried += "; " + where + ": no answer within " + std::to_string(step.count()) + " ms";
        failed.add_unclassified();
        continue;
      }
      const MasterAddressAnswer named = read_master_address(*reply);
      if (!named.unknown) unknown_everywhere = false;
      if (!named.address) {
        tried += "; " + where + ": " + (named.unknown ? std::string("unknown master") : named.problem);
        failed.add_unclassified();
        continue;
      }
      const ConnectionOptions master = master_options(options, named.address->host, named.address->port);
      probe = std::make_shared<AsyncConnection>(executor, master);
      const std::array<std::string_view, 1> role{"ROLE"};
      const ReplyPtr answer = co_await ask(*probe, role, "ROLE", Clock::now() + step);
      if (!role_is_master(answer.get())) {
        probe->close();
        tried += "; " + where + " named " + master.endpoint() + ", which is not a master (ROLE)";
        failed.add_unclassified();
        continue;
      }
      preferred = index;
      co_return probe;
    } catch (const Error& e) {  // the sentinel's or the master's
      sentinel->close();
      if (probe) probe->close();
      unknown_everywhere = false;
      tried += "; " + where + ": " + e.what();
      failed.add(e);
    }
  }
  if (unknown_everywhere)
    throw ConnectError("Sentinel: no sentinel of " + options.endpoint() + " knows master '" + options.master_name +
                       "' (SENTINEL GET-MASTER-ADDR-BY-NAME answered nil)");
  // A wrong password (sentinels' or master's) everywhere is an AuthError here too.
  failed.throw_summary("Sentinel: cannot find master '" + options.master_name + "'" + tried);
}

}  // namespace lockon::detail
