// integration/auto_pipeline_support.hpp — helpers shared by the automatic
// pipelining tests (test_auto_pipeline*.cpp): a Client's shared Pipeline,
// options turning it on, a reply's text.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>

#include "client/client_impl.hpp"
#include "client/pipeline.hpp"
#include "lockon/client.hpp"

namespace lockon::test {

inline ConnectionOptions pipelined_options(int port, std::chrono::milliseconds socket_timeout) {
  ConnectionOptions options;
  options.port = port;
  options.auto_pipeline = true;
  options.socket_timeout = socket_timeout;
  return options;
}

inline detail::Pipeline& pipeline_of(Client& client) {
  detail::Pipeline* pipeline = client.impl()->any_node()->pipeline();
  if (pipeline == nullptr) throw std::runtime_error("auto_pipeline is off");
  return *pipeline;
}

inline std::string text_of(const detail::ReplyPtr& reply) {
  return reply && reply->str ? std::string(reply->str, reply->len) : "<none>";
}

}  // namespace lockon::test
