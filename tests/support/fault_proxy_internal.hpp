// support/fault_proxy_internal.hpp — FaultProxy's insides, shared by its
// sources only: a proxied connection (Link: the data path, its queues and
// timers) and the thread whose poll loop serves one or more proxies.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/fault_proxy.hpp"

namespace lockon::test {

namespace proxy_detail {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxMessage = 64u << 20;  // one command or reply; larger closes the link
constexpr std::size_t kHighWater = 1u << 20;    // queued bytes per direction before reading stops
constexpr std::size_t kReadChunk = 64u << 10;
// Bytes due within this of the last queued chunk join it (one write, not many).
constexpr auto kCoalesce = std::chrono::microseconds(20);

/// What to do with a command once its due time comes (decided when it was parsed).
enum class Step {
  forward,             // to the server; its reply goes to the client
  forward_unpaired,    // to the server; no reply expected (empty command)
  forward_enter_raw,   // SUBSCRIBE & co.: from its reply on, server bytes pass unpaired
  forward_then_close,  // close_after_forward
  forward_then_cut,    // close_mid_reply
  answer_error,        // error_reply
  close_instead,       // close_before_forward
  swallow,             // blackhole rule, and everything after a closing action
};

struct UpItem {
  Clock::time_point due;
  Step step;
  std::string bytes;  // the command as sent, or the error reply
};

/// What the server (or the proxy itself) owes the client next, in order.
enum class Owed { reply, reply_then_close, reply_cut_then_close, synthetic, close, enter_raw };
struct OwedItem {
  Owed kind;
  std::string text;  // a synthetic reply
};

struct DownItem {
  Clock::time_point due;
  std::string bytes;
  bool close = false;  // close the link once everything before it was written
};

}  // namespace proxy_detail

/// A proxied connection: the client's socket and the proxy's to the server.
/// Used by the proxy thread only.
struct FaultProxy::Link {
  using Clock = proxy_detail::Clock;

  Link(FaultProxy& owner, std::size_t number, int client_fd, int server_fd)
      : proxy(&owner), index(number), client(client_fd), server(server_fd) {}
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  // Socket events.
  void read_client();
  void read_server();
  // Timers and pairing; call each round (not while the proxy is blackholed).
  void flush_up(Clock::time_point now);
  void pair_replies();
  void flush_down(Clock::time_point now);

  FaultProxy* proxy;
  std::size_t index;
  int client;
  int server;
  bool connecting = true;
  std::string client_in;  // bytes read from the client, not yet a whole command
  std::string server_in;  // bytes read from the server, not yet a whole reply
  std::deque<proxy_detail::UpItem> up;
  std::size_t up_bytes = 0;
  std::size_t up_written = 0;  // of up.front()
  Clock::time_point last_up_due{};
  std::deque<proxy_detail::OwedItem> owed;
  std::deque<proxy_detail::DownItem> down;
  std::size_t down_bytes = 0;
  std::size_t down_written = 0;  // of down.front()
  Clock::time_point last_down_due{};
  bool swallowing = false;      // later commands are dropped
  bool raw = false;             // server bytes are forwarded unpaired (pub/sub, MONITOR)
  bool closing = false;         // a close is queued: nothing more is read or paired
  bool client_eof = false;
  bool client_blocked = false;  // EAGAIN writing to the client
  bool server_blocked = false;  // EAGAIN writing to the server
  bool closed = false;

 private:
  Clock::duration latency() const;
  void parse_commands();
  void queue_up(proxy_detail::Step step, std::string bytes, Clock::duration extra);
  void pair_replies(std::size_t& consumed);
  void emit(std::string bytes);
  void emit_close();
};

/// One poll loop serving every attached proxy (see FaultProxy::make_thread).
class FaultProxy::Thread {
 public:
  Thread();  // throws std::runtime_error
  ~Thread();
  Thread(const Thread&) = delete;
  Thread& operator=(const Thread&) = delete;

  /// Starts serving `proxy`'s listener.
  void attach(FaultProxy& proxy);
  /// Stops serving it and closes its connections; returns once the loop has
  /// let go of it (the proxy may then be destroyed).
  void detach(FaultProxy& proxy);
  /// Makes the loop re-read knobs and requests now.
  void wake() const noexcept;

 private:
  void run() noexcept;
  void loop();
  bool handle_control();  // false: stop
  void accept_clients(FaultProxy& proxy);

  int wake_fd_ = -1;
  std::mutex mutex_;  // guards attached_, detaching_, stopping_, dead_
  std::condition_variable detached_;
  std::vector<FaultProxy*> attached_;
  std::vector<FaultProxy*> detaching_;
  bool stopping_ = false;
  bool dead_ = false;  // the loop has ended (it then serves nobody)
  // The loop thread's own state.
  std::vector<FaultProxy*> serving_;
  std::vector<std::unique_ptr<Link>> links_;
  std::thread thread_;
};

}  // namespace lockon::test
