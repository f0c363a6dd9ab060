// verify/history.cpp — formatting and parsing of the harness's log lines.
#include "history.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <stdexcept>

#include "lockon/errors.hpp"

namespace lockon::verify {

namespace {

template <class T>
bool to_number(std::string_view text, T& out) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return error == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> fields;
  while (!line.empty()) {
    const auto space = line.find(' ');
    fields.push_back(line.substr(0, space));
    if (space == std::string_view::npos) break;
    line.remove_prefix(space + 1);
  }
  return fields;
}

std::string format(const CsRecord& r) {
  std::string line = "cs " + r.worker + ' ' + std::to_string(r.thread) + ' ' + std::to_string(r.seq) + ' ' +
                     r.mechanism + ' ' + r.key + ' ' + std::to_string(r.fence) + ' ' +
                     std::to_string(r.start_ns) + ' ' + std::to_string(r.acquired_ns) + ' ' +
                     std::to_string(r.release_ns) + ' ' + std::to_string(r.end_ns) + ' ' +
                     std::to_string(r.deadline_ms) + ' ' + r.write + ' ' + (r.lost ? '1' : '0') + ' ' +
                     r.acquire_error + ' ' + r.release_error + ' ' + std::to_string(r.server) + ' ' +
                     std::to_string(r.server_before) + '\n';
  return line;
}

std::string format(const FaultRecord& r) {
  return "fault " + r.type + ' ' + r.target + ' ' + std::to_string(r.start_ns) + ' ' + std::to_string(r.end_ns) +
         ' ' + (r.detail.empty() ? "-" : r.detail) + '\n';
}

std::optional<CsRecord> parse_cs(std::string_view line) {
  const auto f = split(line);
  // 18 fields; 16 or 17 in histories written before the server ports were added.
  if (f.size() < 16 || f.size() > 18 || f[0] != "cs" || f[12].size() != 1 || f[13].size() != 1) return std::nullopt;
  CsRecord r;
  r.worker = f[1];
  r.mechanism = f[4];
  r.key = f[5];
  r.write = f[12][0];
  r.lost = f[13][0] == '1';
  r.acquire_error = f[14];
  r.release_error = f[15];
  if (!to_number(f[2], r.thread) || !to_number(f[3], r.seq) || !to_number(f[6], r.fence) ||
      !to_number(f[7], r.start_ns) || !to_number(f[8], r.acquired_ns) || !to_number(f[9], r.release_ns) ||
      !to_number(f[10], r.end_ns) || !to_number(f[11], r.deadline_ms) ||
      (f.size() >= 17 && !to_number(f[16], r.server)) || (f.size() == 18 && !to_number(f[17], r.server_before)))
    return std::nullopt;
  return r;
}

std::string format(const HoldRecord& r) {
  return "hold " + r.worker + ' ' + r.key + ' ' + std::to_string(r.acquired_ns) + ' ' +
         std::to_string(r.planned_end_ns) + '\n';
}

std::optional<HoldRecord> parse_hold(std::string_view line) {
  const auto f = split(line);
  if (f.size() != 5 || f[0] != "hold") return std::nullopt;
  HoldRecord r;
  r.worker = f[1];
  r.key = f[2];
  if (!to_number(f[3], r.acquired_ns) || !to_number(f[4], r.planned_end_ns)) return std::nullopt;
  return r;
}

std::optional<FaultRecord> parse_fault(std::string_view line) {
  const auto f = split(line);
  if (f.size() != 6 || f[0] != "fault") return std::nullopt;
  FaultRecord r;
  r.type = f[1];
  r.target = f[2];
  r.detail = f[5];
  if (!to_number(f[3], r.start_ns) || !to_number(f[4], r.end_ns)) return std::nullopt;
  return r;
}

std::string error_name(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const LockNotOwned&) { return "LockNotOwned";
  } catch (const LockLost&) { return "LockLost";
  } catch (const AcquireTimeout&) { return "AcquireTimeout";
  } catch (const RetriesExhausted&) { return "RetriesExhausted";
  } catch (const QuorumError&) { return "QuorumError";
  } catch (const LockError&) { return "LockError";
  } catch (const ConnectError&) { return "ConnectError";
  } catch (const TimeoutError&) { return "TimeoutError";
  } catch (const ClosedError&) { return "ClosedError";
  } catch (const ProtocolError&) { return "ProtocolError";
  } catch (const IoError&) { return "IoError";
  } catch (const AuthError&) { return "AuthError";
  } catch (const WrongTypeError&) { return "WrongTypeError";
  } catch (const ReplyError& e) {
    // The error code (first word) says which fault it was: OOM, READONLY...
    const std::string text = e.what();
    std::string code = "ReplyError";
    for (const char* known : {"OOM", "READONLY", "NOPERM", "LOADING", "BUSY", "TRYAGAIN", "NOSCRIPT", "EXECABORT"})
      if (text.find(known) != std::string::npos) return code + ':' + known;
    return code;
  } catch (const PoolTimeoutError&) { return "PoolTimeoutError";
  } catch (const ConfigError&) { return "ConfigError";
  } catch (const Error&) { return "Error";
  } catch (const std::exception&) { return "std";
  } catch (...) { return "unknown";
  }
}

LineLog::LineLog(const std::string& path) : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {
  if (fd_ < 0) throw std::runtime_error("cannot open " + path);
}

LineLog::~LineLog() {
  if (fd_ >= 0) ::close(fd_);
}

void LineLog::append(std::string line) {
  // O_APPEND + one write per line: lines of concurrent writers never interleave.
  const char* data = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, data, left);
    if (n <= 0) return;
    data += n;
    left -= static_cast<std::size_t>(n);
  }
}

}  // namespace lockon::verify
