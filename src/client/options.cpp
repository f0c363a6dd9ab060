// URL and duration parsing for lockon/options.hpp.
//
// Every error message describes the offending part without echoing the
// password: messages are built from the parts we already validated, never
// from the raw URL.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lockon/errors.hpp"
#include "lockon/options.hpp"

namespace lockon {
namespace {

[[noreturn]] void url_error(std::string_view what) {
  throw ConfigError("invalid Redis URL: " + std::string(what));
}

std::optional<long long> parse_integer(std::string_view text) {
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decoding for user and password. The part's name (not its value)
// goes into the error so a malformed password is never printed.
std::string percent_decode(std::string_view text, std::string_view part_name) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) url_error("truncated %-escape in the " + std::string(part_name));
    const int hi = hex_value(text[i + 1]);
    const int lo = hex_value(text[i + 2]);
    if (hi < 0 || lo < 0) url_error("bad %-escape in the " + std::string(part_name));
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

int parse_db(std::string_view text) {
  const auto db = parse_integer(text);
  if (!db || *db < 0 || *db > std::numeric_limits<int>::max())
    url_error("database index '" + std::string(text) + "' is not a non-negative integer");
  return static_cast<int>(*db);
}

bool parse_bool(std::string_view key, std::string_view value) {
  if (value == "1" || value == "true" || value == "yes" || value == "on") return true;
  if (value == "0" || value == "false" || value == "no" || value == "off") return false;
  url_error("query parameter '" + std::string(key) + "' expects true/false, got '" + std::string(value) + "'");
}

// True when `userinfo` (the text before the URL's last '@') has a '?'
// after which some "name=" (name in [A-Za-z_]) follows a '?' or an '&':
// then the '@' may be in a query value. Every such place counts, not only
// the first '?': a password may hold '?' itself, and a query may begin
// with an empty pair ("?&db=1"; both slipped through: review, session 21).
// (A password like "a?b=c" is refused too; percent-encoded it is fine.)
bool userinfo_holds_a_query(std::string_view userinfo) {
  const auto first = userinfo.find('?');
  if (first == std::string_view::npos) return false;
  constexpr std::string_view kNameChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_";
  for (std::size_t at = first; at < userinfo.size(); ++at) {
    if (userinfo[at] != '?' && userinfo[at] != '&') continue;
    const std::string_view after = userinfo.substr(at + 1);
    const auto name_end = after.find_first_not_of(kNameChars);
    if (name_end != 0 && name_end != std::string_view::npos && after[name_end] == '=') return true;
  }
  return false;
}

// `db_in_path`: the URL's path named the database already.
void apply_query(std::string_view query, ConnectionOptions& options, bool db_in_path) {
  std::vector<std::string_view> seen;  // a repeated parameter is a mistake, not "the last one wins"
  if (db_in_path) seen.push_back("db");
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    if (eq == std::string_view::npos) url_error("query parameter '" + std::string(pair) + "' has no value");
    const std::string_view key = pair.substr(0, eq);
    const std::string_view value = pair.substr(eq + 1);
    if (std::find(seen.begin(), seen.end(), key) != seen.end())
      url_error("query parameter '" + std::string(key) + "' given twice" +
                (key == "db" && db_in_path ? std::string(" (the path names the database too)") : std::string()));
    seen.push_back(key);
    try {
      if (key == "connect_timeout") {
        options.connect_timeout = parse_duration(value);
      } else if (key == "socket_timeout") {
        options.socket_timeout = parse_duration(value);
      } else if (key == "db") {
        options.db = parse_db(value);
      } else if (key == "auto_pipeline") {
        options.auto_pipeline = parse_bool(key, value);
      } else if (key == "keepalive") {
        options.keepalive = parse_bool(key, value);
      } else if (key == "cacert" || key == "cacertdir" || key == "cert" || key == "key" || key == "sni" ||
                 key == "insecure") {
        if (!options.tls.enabled)
          url_error("query parameter '" + std::string(key) + "' needs a TLS scheme (rediss://...)");
        if (key == "insecure") options.tls.insecure = parse_bool(key, value);
        else if (key == "cacert") options.tls.cacert = percent_decode(value, key);
        else if (key == "cacertdir") options.tls.cacertdir = percent_decode(value, key);
        else if (key == "cert") options.tls.cert = percent_decode(value, key);
        else if (key == "key") options.tls.key = percent_decode(value, key);
        else options.tls.sni = percent_decode(value, key);
      } else if (key == "sentinel_user" || key == "sentinel_password") {
        if (options.deployment != Deployment::sentinel)
          url_error("query parameter '" + std::string(key) + "' needs a sentinel scheme (redis-sentinel://...)");
        (key == "sentinel_user" ? options.sentinel_user : options.sentinel_password) = percent_decode(value, key);
      } else {
        url_error("unknown query parameter '" + std::string(key) +
                  "' (known: connect_timeout, socket_timeout, db, auto_pipeline, keepalive; with rediss: cacert, "
                  "cacertdir, cert, key, sni, insecure; with redis-sentinel: sentinel_user, sentinel_password)");
      }
    } catch (const ConfigError& e) {
      if (std::string_view(e.what()).starts_with("invalid Redis URL")) throw;
      url_error("query parameter '" + std::string(key) + "': " + e.what());
    }
  }
}

// Splits "host[:port]" where host may be "[v6]".
void parse_host_port(std::string_view hostport, ConnectionOptions& options) {
  std::string_view host;
  std::string_view port;
  if (hostport.starts_with('[')) {
    const auto close = hostport.find(']');
    if (close == std::string_view::npos) url_error("unterminated '[' in IPv6 host");
    host = hostport.substr(1, close - 1);
    const std::string_view rest = hostport.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') url_error("unexpected text after IPv6 host");
      port = rest.substr(1);
      if (port.empty()) url_error("empty port after ':'");
    }
    if (host.empty()) url_error("empty IPv6 host");
  } else {
    const auto colon = hostport.rfind(':');
    if (colon != std::string_view::npos) {
      if (hostport.find(':') != colon) url_error("IPv6 hosts must be written in brackets, e.g. [::1]");
      host = hostport.substr(0, colon);
      port = hostport.substr(colon + 1);
      if (port.empty()) url_error("empty port after ':'");
    } else {
      host = hostport;
    }
  }
  if (host.empty()) url_error("missing host");
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_' || c == ':' || c == '%';
    if (!ok) url_error("host contains an invalid character");
  }
  options.host = std::string(host);
  if (!port.empty()) {
    // Only digits are echoed: in "redis://user:password" (no '@host') the
    // password stands where the port would (review, session 21).
    if (port.find_first_not_of("0123456789") != std::string_view::npos)
      url_error("port is not a number (credentials go before an '@': redis://user:password@host:port)");
    const auto value = parse_integer(port);
    if (!value || *value < 1 || *value > 65535)  // more than 5 digits: no port, maybe a password
      url_error(port.size() <= 5 ? "port '" + std::string(port) + "' is not in 1..65535" : "port is not in 1..65535");
    options.port = static_cast<int>(*value);
  }
}

}  // namespace

std::string ConnectionOptions::endpoint() const {
  const auto one = [](const std::string& h, int p) {
    if (h.find(':') != std::string::npos) return "[" + h + "]:" + std::to_string(p);
    return h + ":" + std::to_string(p);
  };
  if (deployment != Deployment::standalone) {
    std::string out = deployment == Deployment::sentinel ? "sentinel:" + master_name + "@" : "cluster:";
    if (seeds.empty()) return out + one(host, port);
    // Appended piecewise: GCC 12 warns -Wrestrict (a false positive, its
    // PR 105651) on "literal" + std::string&& at -O3.
    for (std::size_t i = 0; i < seeds.size(); ++i) {
      if (i > 0) out += ',';
      out += one(seeds[i].host, seeds[i].port);
    }
    return out;
  }
  if (!unix_path.empty()) return "unix:" + unix_path;
  return one(host, port);
}

ConnectionOptions ConnectionOptions::from_url(std::string_view url) {
  ConnectionOptions options;
  if (url.empty()) url_error("empty URL");
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos)
    url_error("missing scheme (expected redis://host[:port][/db] or unix:///path)");
  const std::string_view scheme = url.substr(0, scheme_end);
  std::string_view rest = url.substr(scheme_end + 3);

  // The fragment and the query start at the first '#' / '?' after the last
  // '@': like '@' and '/', a '?' or '#' inside the password must not split
  // the URL there (it would put password bytes into the port, path or
  // query, and so into messages).
  const auto last_at = rest.rfind('@');
  const std::size_t after_userinfo = last_at == std::string_view::npos ? 0 : last_at;
  // That rule cannot tell a password with '?' and '@' from an '@' in a
  // query value: "redis://:pw@h?cacert=/ca@1.pem" would send AUTH with
  // "pw@h?cacert=/ca" to host "1.pem". Text before the last '@' that reads
  // as one of our query parameters is refused instead (review, session 21).
  if (last_at != std::string_view::npos && userinfo_holds_a_query(rest.substr(0, last_at)))
    url_error("ambiguous '@' after a query parameter: percent-encode it as %40 in query values "
              "(or '?' as %3F in a password)");
  std::string_view fragment;
  bool has_fragment = false;
  if (const auto h = rest.find('#', after_userinfo); h != std::string_view::npos) {
    fragment = rest.substr(h + 1);
    rest = rest.substr(0, h);
    has_fragment = true;
  }
  std::string_view query;
  if (const auto q = rest.find('?', after_userinfo); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }

  if (scheme == "unix") {
    if (has_fragment) url_error("unexpected '#' fragment in a unix socket URL");
    if (rest.empty() || rest[0] != '/') url_error("unix socket path must be absolute (unix:///path/to.sock)");
    options.unix_path = std::string(rest);
    options.host.clear();
    apply_query(query, options, false);
    return options;
  }
  if (scheme == "redis" || scheme == "rediss") {
    options.deployment = Deployment::standalone;
  } else if (scheme == "redis-sentinel" || scheme == "rediss-sentinel") {
    options.deployment = Deployment::sentinel;
    options.port = 26379;  // a sentinel's default port
  } else if (scheme == "redis-cluster" || scheme == "rediss-cluster") {
    options.deployment = Deployment::cluster;
  } else {
    // Echo only a well-formed scheme (RFC 3986: letters, digits, + - .): text
    // before a "://" that appears later in a scheme-less URL may be a password.
    constexpr std::string_view kSchemeChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.";
    const bool well_formed = !scheme.empty() && scheme.size() <= 20 &&
                             scheme.find_first_not_of(kSchemeChars) == std::string_view::npos;
    constexpr std::string_view kExpected =
        " (expected redis, rediss, unix, redis-sentinel, rediss-sentinel, redis-cluster or rediss-cluster)";
    if (!well_formed) url_error("unsupported scheme" + std::string(kExpected));
    url_error("unsupported scheme '" + std::string(scheme) + "'" + std::string(kExpected));
  }
  options.tls.enabled = scheme.starts_with("rediss");

  // Credentials end at the LAST '@' before the path: passwords may contain '@'.
  const auto slash = rest.find('/', after_userinfo);
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);

  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    const auto colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      // "redis://secret@host" is how many clients spell a password-only URL.
      options.password = percent_decode(userinfo, "password");
    } else {
      options.user = percent_decode(userinfo.substr(0, colon), "user name");
      options.password = percent_decode(userinfo.substr(colon + 1), "password");
    }
    if (!options.user.empty() && options.password.empty())
      url_error("user name given without a password");
  }
  if (options.deployment == Deployment::standalone) {
    if (has_fragment) url_error("unexpected '#' fragment (only sentinel URLs name a master with '#name')");
    if (authority.find(',') != std::string_view::npos)
      url_error("several hosts in a redis:// URL (use redis-sentinel:// or redis-cluster://; "
                "for Redlock give one URL per node)");
    parse_host_port(authority, options);
  } else {
    const int default_port = options.port;
    while (true) {
      const auto comma = authority.find(',');
      ConnectionOptions node;
      node.port = default_port;
      parse_host_port(authority.substr(0, comma), node);
      const NodeAddress address{node.host, node.port};
      for (const NodeAddress& seen : options.seeds)
        if (seen == address) url_error("host " + node.endpoint() + " is listed twice");
      options.seeds.push_back(address);
      if (comma == std::string_view::npos) break;
      authority = authority.substr(comma + 1);
    }
    options.host = options.seeds.front().host;
    options.port = options.seeds.front().port;
  }
  if (!path.empty()) {
    if (options.deployment == Deployment::cluster) url_error("a cluster URL takes no database index (Redis Cluster has db 0 only)");
    options.db = parse_db(path);
  }
  if (options.deployment == Deployment::sentinel) {
    if (fragment.empty()) url_error("a sentinel URL needs the master's name after '#' (redis-sentinel://host:26379#mymaster)");
    // A query written after the fragment would become part of the name
    // (and with it a sentinel password, into every endpoint() and message).
    if (fragment.find_first_of("?&=") != std::string_view::npos)
      url_error("the master name after '#' contains '?', '&' or '=' (the query goes before '#'; "
                "percent-encode them in a name)");
    options.master_name = percent_decode(fragment, "master name");
  }
  apply_query(query, options, !path.empty());
  if (options.deployment == Deployment::cluster && options.db != 0)
    url_error("a cluster URL takes no database index (Redis Cluster has db 0 only)");
  return options;
}

namespace {

struct DurationPart {
  double ms = 0;
  int rank = 0;  // h 4, m 3, s 2, ms 1, us 0: parts go from larger to smaller
};

// One number and its unit ("2m", "1.5s") from the front of `rest`.
DurationPart take_duration_part(std::string_view& rest, const std::string& shown, bool bare_allowed) {
  std::size_t unit_at = 0;
  while (unit_at < rest.size() && ((rest[unit_at] >= '0' && rest[unit_at] <= '9') || rest[unit_at] == '.')) ++unit_at;
  std::size_t unit_end = unit_at;
  while (unit_end < rest.size() && rest[unit_end] >= 'a' && rest[unit_end] <= 'z') ++unit_end;
  const std::string_view number = rest.substr(0, unit_at);
  const std::string_view unit = rest.substr(unit_at, unit_end - unit_at);
  rest.remove_prefix(unit_end);
  if (number.empty() || number.find('.') != number.rfind('.'))
    throw ConfigError("invalid duration '" + shown + "' (expected e.g. 500ms, 10s, 2m30s)");
  double value = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || end != number.data() + number.size()) throw ConfigError("invalid duration '" + shown + "'");
  if (unit.empty() && !bare_allowed)
    throw ConfigError("invalid duration '" + shown + "': every part needs a unit (e.g. 2m30s)");
  if (unit.empty() || unit == "ms") return {value, 1};
  if (unit == "s") return {value * 1000, 2};
  if (unit == "m" || unit == "min") return {value * 60'000, 3};
  if (unit == "h") return {value * 3'600'000, 4};
  if (unit == "us") return {value * 0.001, 0};
  throw ConfigError("invalid duration '" + shown + "': unknown unit (use ms, s, m or h)");
}

}  // namespace

std::chrono::milliseconds parse_duration(std::string_view text) {
  const std::string shown(text);
  if (text.empty()) throw ConfigError("invalid duration: empty");
  // Parts from the largest unit to the smallest, as Go's time.ParseDuration
  // reads them ("1h30m", "2m30s", "1s500ms"); a bare number alone is
  // milliseconds.
  const bool bare = text.find_first_not_of("0123456789.") == std::string_view::npos;
  std::string_view rest = text;
  double ms = 0;
  int last_rank = 5;
  while (!rest.empty()) {
    const DurationPart part = take_duration_part(rest, shown, bare);
    if (part.rank >= last_rank)
      throw ConfigError("invalid duration '" + shown + "': units must go from larger to smaller (e.g. 1h30m, 2m30s)");
    last_rank = part.rank;
    ms += part.ms;
  }
  if (!std::isfinite(ms) || ms > 1e15) throw ConfigError("invalid duration '" + shown + "': too large");
  // A positive duration below 1 ms is 1 ms, never 0: a timeout of 0 means
  // "no bound", the opposite of what "100us" asks for (found by review,
  // session 18).
  if (ms > 0 && ms < 1) return std::chrono::milliseconds(1);
  return std::chrono::milliseconds(static_cast<long long>(std::llround(ms)));
}

}  // namespace lockon
