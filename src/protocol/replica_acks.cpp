#include "protocol/replica_acks.hpp"

namespace lockon::detail {

const Script& touch_grant() {
  static const Script script(
      "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL') return 1 end "
      "return 0");
  return script;
}

ReplicationError not_enough_replicas(const std::string& name, std::string_view endpoint, int acknowledged,
                                     const ReplicaAcks& acks) {
  return ReplicationError("lock '" + name + "' on " + std::string(endpoint) + ": " + std::to_string(acknowledged) +
                              " of " + std::to_string(acks.replicas) +
                              " required replicas acknowledged the grant within " +
                              std::to_string(acks.timeout.count()) + " ms (WAIT); the lock was released",
                          name, acknowledged, acks.replicas);
}

}  // namespace lockon::detail
