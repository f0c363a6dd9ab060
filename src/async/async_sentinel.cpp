#include "async/async_sentinel.hpp"

#include <array>
#include <cstdlib>
#include <string>
#include <string_view>

#include "client/connection.hpp"
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

bool is_readonly_reply(const redisReply& reply) noexcept {
  return reply.type == REDIS_REPLY_ERROR && text_of(reply).starts_with("READONLY");
}

asio::awaitable<std::shared_ptr<AsyncConnection>> async_resolve_master(asio::any_io_executor executor,
                                                                       const ConnectionOptions& options,
                                                                       std::size_t& preferred) {
  const auto sentinels = sentinels_of(options);
  const auto step = or_default(options.connect_timeout) + or_default(options.socket_timeout);
  const auto budget = 2 * step + std::chrono::milliseconds(100);
  const auto give_up_at = Clock::now() + budget;
  const std::size_t first = preferred;
  std::string tried;
  bool unknown_everywhere = true;
  for (std::size_t i = 0; i < sentinels.size(); ++i) {
    if (i > 0 && Clock::now() >= give_up_at) {
      tried += "; resolution budget of " + std::to_string(budget.count()) + " ms spent";
      break;
    }
    const std::size_t index = (first + i) % sentinels.size();
    const ConnectionOptions sentinel_opts = sentinel_options(options, sentinels[index]);
    const std::string where = sentinel_opts.endpoint();
    auto sentinel = std::make_shared<AsyncConnection>(executor, sentinel_opts);
    std::shared_ptr<AsyncConnection> probe;
    try {
      const std::array<std::string_view, 3> question{"SENTINEL", "GET-MASTER-ADDR-BY-NAME", options.master_name};
      const ReplyPtr reply =
          co_await ask(*sentinel, question, "SENTINEL GET-MASTER-ADDR-BY-NAME", Clock::now() + step);
      sentinel->close();
      if (!reply) {
        unknown_everywhere = false;
        tried += "; " + where + ": no answer within " + std::to_string(step.count()) + " ms";
        continue;
      }
      if (reply->type == REDIS_REPLY_NIL) {
        tried += "; " + where + ": unknown master";
        continue;
      }
      unknown_everywhere = false;
      if (reply->type == REDIS_REPLY_ERROR) {
        tried += "; " + where + ": " + std::string(text_of(*reply).substr(0, 120));
        continue;
      }
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
        tried += "; " + where + ": unexpected reply";
        continue;
      }
      const std::string host(text_of(*reply->element[0]));
      const int port = std::atoi(std::string(text_of(*reply->element[1])).c_str());
      const ConnectionOptions master = master_options(options, host, port);
      probe = std::make_shared<AsyncConnection>(executor, master);
      const std::array<std::string_view, 1> role{"ROLE"};
      const ReplyPtr answer = co_await ask(*probe, role, "ROLE", Clock::now() + step);
      if (!answer || answer->type != REDIS_REPLY_ARRAY || answer->elements < 1 ||
          text_of(*answer->element[0]) != "master") {
        probe->close();
        tried += "; " + where + " named " + master.endpoint() + ", which is not a master (ROLE)";
        continue;
      }
      preferred = index;
      co_return probe;
    } catch (const Error& e) {
      sentinel->close();
      if (probe) probe->close();
      unknown_everywhere = false;
      tried += "; " + where + ": " + e.what();
    }
  }
  if (unknown_everywhere)
    throw ConnectError("Sentinel: no sentinel of " + options.endpoint() + " knows master '" + options.master_name +
                       "' (SENTINEL GET-MASTER-ADDR-BY-NAME answered nil)");
  throw ConnectError("Sentinel: cannot find master '" + options.master_name + "'" + tried);
}

}  // namespace lockon::detail
