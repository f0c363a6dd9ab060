// integration/auto_pipeline_support.hpp — helpers shared by the automatic
// pipelining tests (test_auto_pipeline*.cpp): a Client's shared Pipeline,
// options turning it on, a reply's text, a SET/GET round trip, a call run on
// its own thread.
#pragma once

#include <array>
#include <chrono>
#include <exception>
#include <future>
#include <stdexcept>
#include <string>
#include <string_view>

#include "client/client_impl.hpp"
#include "client/pipeline.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "support/fixtures.hpp"

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

/// SET then GET of a per-thread key through the shared connection: the GET
/// must return this thread's value (a misdelivered reply would not). Throws
/// std::runtime_error on any other answer.
inline void set_get(detail::Pipeline& pipeline, const std::string& key, const std::string& value,
                    std::chrono::steady_clock::time_point deadline) {
  const std::array<std::string_view, 3> set{"SET", key, value};
  const detail::ReplyPtr ok = pipeline.call(set, deadline, "SET");
  if (text_of(ok) != "OK") throw std::runtime_error("SET " + key + " answered " + text_of(ok));
  const std::array<std::string_view, 2> get{"GET", key};
  const detail::ReplyPtr got = pipeline.call(get, deadline, "GET");
  if (text_of(got) != value) throw std::runtime_error("GET " + key + " answered " + text_of(got) + ", wanted " + value);
}

/// How a call run by start() ended.
struct Outcome {
  std::string value;     // the reply's text, or the error's message
  bool timeout = false;  // TimeoutError
  bool failed = false;   // any exception
  bool typed = false;    // a reply or a lockon::Error: never an untyped exception
  long long at_ms = 0;   // since the test's start
};

/// Runs `call` (returning the reply's text) on another thread; the future
/// holds how it ended.
template <class Call>
std::future<Outcome> start(std::chrono::steady_clock::time_point t0, Call call) {
  return std::async(std::launch::async, [t0, call] {
    Outcome outcome;
    try {
      outcome.value = call();
      outcome.typed = true;
    } catch (const TimeoutError& e) {
      outcome.value = e.what();
      outcome.failed = outcome.timeout = outcome.typed = true;
    } catch (const Error& e) {
      outcome.value = e.what();
      outcome.failed = outcome.typed = true;
    } catch (const std::exception& e) {
      outcome.value = std::string("untyped: ") + e.what();
      outcome.failed = true;
    }
    outcome.at_ms = ms_since(t0);
    return outcome;
  });
}

}  // namespace lockon::test
