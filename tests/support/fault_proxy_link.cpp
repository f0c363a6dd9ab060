// support/fault_proxy_link.cpp — one proxied connection's data path: commands
// parsed and judged by the rules, queued with their due times, forwarded;
// replies paired with the commands that asked for them.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "support/fault_proxy_internal.hpp"
#include "support/fault_proxy_resp.hpp"

namespace lockon::test {
namespace {

using namespace proxy_detail;

// Writes bytes[offset..]; advances offset. False on a socket error; sets
// `blocked` when the socket is full.
bool write_some(int fd, const std::string& bytes, std::size_t& offset, bool& blocked) {
  while (offset < bytes.size()) {
    const auto n = ::send(fd, bytes.data() + offset, bytes.size() - offset, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        blocked = true;
        return true;
      }
      return false;
    }
    offset += static_cast<std::size_t>(n);
  }
  return true;
}

enum class Read { some, eof, failed };

// Appends what is readable (up to one chunk) to `into`.
Read read_some(int fd, std::string& into) {
  char buffer[kReadChunk];
  for (;;) {
    const auto n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      into.append(buffer, static_cast<std::size_t>(n));
      return Read::some;
    }
    if (n == 0) return Read::eof;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? Read::some : Read::failed;
  }
}

// PSYNC/SYNC: a replica replicating through the proxy (an RDB payload has
// no trailing CRLF, and the command stream that follows answers nothing).
bool enters_raw_mode(std::string_view name) {
  return name == "SUBSCRIBE" || name == "PSUBSCRIBE" || name == "SSUBSCRIBE" || name == "MONITOR" ||
         name == "PSYNC" || name == "SYNC";
}

bool forwards(Step step) {
  return step == Step::forward || step == Step::forward_unpaired || step == Step::forward_enter_raw ||
         step == Step::forward_then_close || step == Step::forward_then_cut;
}

}  // namespace

FaultProxy::Link::~Link() {
  if (client >= 0) ::close(client);
  if (server >= 0) ::close(server);
}

FaultProxy::Link::Clock::duration FaultProxy::Link::latency() const {
  return std::chrono::microseconds(proxy->latency_us_.load(std::memory_order_relaxed));
}

void FaultProxy::Link::read_client() {
  const Read result = read_some(client, client_in);
  if (result == Read::failed) {  // a reset: gone at once
    closed = true;
    return;
  }
  // On EOF what the client sent before still goes to the server; then the
  // link closes (the thread sees client_eof with nothing left to send).
  if (result == Read::eof) client_eof = true;
  parse_commands();
}

void FaultProxy::Link::parse_commands() {
  resp::Command command;
  std::size_t consumed = 0;
  for (;;) {
    const std::string_view rest = std::string_view(client_in).substr(consumed);
    const resp::Scan scan = resp::scan_command(rest, command);
    if (scan == resp::Scan::incomplete) {
      if (rest.size() >= kMaxMessage) closed = true;
      break;
    }
    if (scan == resp::Scan::malformed) {  // Redis would close it too, after an error
      closed = true;
      break;
    }
    std::string bytes(rest.substr(0, command.length));
    consumed += command.length;
    if (command.words.empty()) {  // Redis ignores it without a reply
      queue_up(swallowing ? Step::swallow : Step::forward_unpaired, std::move(bytes), {});
      continue;
    }
    proxy->commands_seen_.fetch_add(1);
    if (swallowing) {
      queue_up(Step::swallow, {}, {});
      continue;
    }
    const Decision decision = proxy->decide(index, command.name, command.words);
    Clock::duration extra{};
    Step step = enters_raw_mode(command.name) ? Step::forward_enter_raw : Step::forward;
    switch (decision.action) {
      case FaultAction::pass: break;
      case FaultAction::delay: extra = decision.delay; break;
      case FaultAction::close_before_forward: step = Step::close_instead; break;
      case FaultAction::close_after_forward: step = Step::forward_then_close; break;
      case FaultAction::close_mid_reply: step = Step::forward_then_cut; break;
      case FaultAction::error_reply:
        step = Step::answer_error;
        bytes = "-" + decision.error + "\r\n";
        break;
      case FaultAction::blackhole:
        step = Step::swallow;
        bytes.clear();
        break;
    }
    // What follows a lost connection (or a partition) is lost with it.
    if (step != Step::forward && step != Step::forward_enter_raw && step != Step::answer_error) swallowing = true;
    queue_up(step, std::move(bytes), extra);
  }
  client_in.erase(0, consumed);
}

void FaultProxy::Link::queue_up(Step step, std::string bytes, Clock::duration extra) {
  // TCP keeps order: nothing overtakes a delayed command.
  const auto due = std::max(last_up_due, Clock::now() + latency() + extra);
  last_up_due = due;
  up_bytes += bytes.size();
  up.push_back({due, step, std::move(bytes)});
}

void FaultProxy::Link::flush_up(Clock::time_point now) {
  while (!connecting && !server_blocked && !closed && !up.empty() && up.front().due <= now) {
    UpItem& item = up.front();
    if (forwards(item.step)) {
      if (!write_some(server, item.bytes, up_written, server_blocked)) {
        closed = true;
        return;
      }
      if (server_blocked) return;
    }
    switch (item.step) {
      case Step::forward: owed.push_back({Owed::reply, {}}); break;
      case Step::forward_unpaired: break;
      case Step::forward_enter_raw: owed.push_back({Owed::enter_raw, {}}); break;
      case Step::forward_then_close: owed.push_back({Owed::reply_then_close, {}}); break;
      case Step::forward_then_cut: owed.push_back({Owed::reply_cut_then_close, {}}); break;
      case Step::answer_error: owed.push_back({Owed::synthetic, item.bytes}); break;
      case Step::close_instead: owed.push_back({Owed::close, {}}); break;
      case Step::swallow: break;
    }
    up_bytes -= item.bytes.size();
    up_written = 0;
    up.pop_front();
  }
}

void FaultProxy::Link::read_server() {
  if (read_some(server, server_in) == Read::some) {
    pair_replies();
    return;
  }
  // The server closed (or reset): the client gets what arrived, then EOF.
  pair_replies();
  if (!closing) {
    if (!server_in.empty()) emit(std::move(server_in));
    emit_close();
  }
}

void FaultProxy::Link::pair_replies() {
  std::size_t consumed = 0;  // of server_in; erased once at the end (pipelines)
  pair_replies(consumed);
  if (!closing) server_in.erase(0, consumed);
}

void FaultProxy::Link::pair_replies(std::size_t& consumed) {
  const auto forward_rest = [&] {
    if (consumed < server_in.size()) emit(server_in.substr(consumed));
    consumed = server_in.size();
  };
  while (!closing && !closed) {
    if (!owed.empty()) {
      OwedItem& front = owed.front();
      if (front.kind == Owed::synthetic) {
        emit(std::move(front.text));
        owed.pop_front();
        continue;
      }
      if (front.kind == Owed::close) {
        emit_close();
        return;
      }
      if (front.kind == Owed::enter_raw) {
        raw = true;
        owed.pop_front();
        continue;
      }
      if (raw) {  // replies are not told apart from pushes any more
        const bool closes = front.kind != Owed::reply;
        owed.pop_front();
        if (closes) {
          forward_rest();
          emit_close();
          return;
        }
        continue;
      }
    }
    if (consumed == server_in.size()) return;
    if (raw) {
      forward_rest();
      return;
    }
    const std::string_view rest = std::string_view(server_in).substr(consumed);
    std::size_t length = 0;
    const resp::Scan scan = resp::scan_reply(rest, length);
    if (scan == resp::Scan::incomplete) {
      if (rest.size() >= kMaxMessage) closed = true;  // no longer read: give up
      return;
    }
    if (scan == resp::Scan::malformed) {
      closed = true;
      return;
    }
    const std::string_view reply = rest.substr(0, length);
    consumed += length;
    if (reply.front() == '>' || owed.empty()) {  // a RESP3 push, or a reply nobody asked for
      emit(std::string(reply));
      continue;
    }
    const Owed kind = owed.front().kind;
    owed.pop_front();
    if (kind == Owed::reply) {
      emit(std::string(reply));
      continue;
    }
    if (kind == Owed::reply_cut_then_close) emit(std::string(reply.substr(0, std::max<std::size_t>(1, length / 2))));
    emit_close();
  }
}

void FaultProxy::Link::emit(std::string bytes) {
  const auto due = std::max(last_down_due, Clock::now() + latency());
  last_down_due = due;
  down_bytes += bytes.size();
  // Replies parsed from one read leave in one write: they join the last chunk
  // if it is due within kCoalesce (all of it then waits for the later due
  // time, so no byte is early).
  if (!down.empty() && !down.back().close && due - down.back().due <= kCoalesce) {
    down.back().due = due;
    down.back().bytes += bytes;
    return;
  }
  down.push_back({due, std::move(bytes), false});
}

void FaultProxy::Link::emit_close() {
  const auto due = std::max(last_down_due, Clock::now() + latency());
  last_down_due = due;
  down.push_back({due, {}, true});
  closing = true;
  owed.clear();
  server_in.clear();
}

void FaultProxy::Link::flush_down(Clock::time_point now) {
  while (!client_blocked && !closed && !down.empty() && down.front().due <= now) {
    DownItem& item = down.front();
    if (item.close) {
      closed = true;
      return;
    }
    if (!write_some(client, item.bytes, down_written, client_blocked)) {
      closed = true;
      return;
    }
    if (client_blocked) return;
    down_bytes -= item.bytes.size();
    down_written = 0;
    down.pop_front();
  }
}

}  // namespace lockon::test
