// support/fault_proxy_resp.hpp — the RESP framing FaultProxy needs: where a
// command or a reply ends in a byte stream, and a command's words. Internal
// to the proxy (no allocation beyond the words' views; nothing is copied).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace lockon::test::resp {

enum class Scan { complete, incomplete, malformed };

/// Whether `data` starts with one whole RESP2/RESP3 value (a reply); on
/// `complete`, `length` is its size in bytes. Bulk payloads are skipped by
/// their declared length, so scanning a large value costs its headers only.
Scan scan_reply(std::string_view data, std::size_t& length);

/// One command as a client sent it: multibulk ("*2\r\n$3\r\nGET\r\n...") or
/// inline ("GET k\r\n"). `words` view into the scanned buffer; `name` is the
/// first word upper-cased (empty for an empty command, which Redis ignores
/// without replying).
struct Command {
  std::size_t length = 0;
  std::string name;
  std::vector<std::string_view> words;
};

/// Whether `data` starts with one whole command; fills `command` on `complete`.
Scan scan_command(std::string_view data, Command& command);

}  // namespace lockon::test::resp
