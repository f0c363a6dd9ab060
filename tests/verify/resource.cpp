// verify/resource.cpp — the fenced resource's Lua script and its client.
#include "resource.hpp"

#include <thread>

#include "lockon/errors.hpp"

namespace lockon::verify {

namespace {

// KEYS: state hash, accepted-write log. ARGV: op ('r'/'w'), fence, holder,
// value read (for 'w'). Returns {1, value} when allowed, {0, maxfence} when
// refused.
constexpr const char* kScript = R"lua(
local maxf = tonumber(redis.call('HGET', KEYS[1], 'maxfence') or '0')
local f = tonumber(ARGV[2])
if f < maxf or (f == maxf and redis.call('HGET', KEYS[1], 'holder') ~= ARGV[3]) then
  redis.call('HINCRBY', KEYS[1], ARGV[1] == 'r' and 'rejected_reads' or 'rejected_writes', 1)
  return {0, maxf}
end
redis.call('HSET', KEYS[1], 'maxfence', ARGV[2], 'holder', ARGV[3])
local current = tonumber(redis.call('HGET', KEYS[1], 'value') or '0')
if ARGV[1] == 'r' then return {1, current} end
if current ~= tonumber(ARGV[4]) then redis.call('HINCRBY', KEYS[1], 'conflicts', 1) end
redis.call('HSET', KEYS[1], 'value', tonumber(ARGV[4]) + 1)
redis.call('HINCRBY', KEYS[1], 'accepted', 1)
redis.call('RPUSH', KEYS[2], ARGV[2] .. ' ' .. ARGV[3])
return {1, current}
)lua";

}  // namespace

Resource::Resource(const std::string& url, std::size_t connections)
    : client_(url, PoolOptions{.size = connections}) {}

char Resource::fenced_increment(const std::string& key, std::uint64_t fence, const std::string& holder,
                                 std::chrono::microseconds hold) const {
  const std::string state = "res:" + key;
  const std::string log = state + ":log";
  const std::string fence_text = std::to_string(fence);
  try {
    const Reply read = client_.command({"EVAL", kScript, "2", state, log, "r", fence_text, holder, "0"});
    if (read.elements().at(0).as_integer() == 0) return 'R';
    const std::string value = std::to_string(read.elements().at(1).as_integer());
    if (hold.count() > 0) std::this_thread::sleep_for(hold);
    const Reply write = client_.command({"EVAL", kScript, "2", state, log, "w", fence_text, holder, value});
    return write.elements().at(0).as_integer() == 0 ? 'R' : 'A';
  } catch (const Error&) {
    return 'E';
  }
}

char Resource::unfenced_access(const std::string& key, std::chrono::microseconds hold) const {
  const std::string state = "unfenced:" + key;
  try {
    client_.command({"GET", state});
    if (hold.count() > 0) std::this_thread::sleep_for(hold);
    client_.command({"INCR", state});
    return 'A';
  } catch (const Error&) {
    return 'E';
  }
}

}  // namespace lockon::verify
