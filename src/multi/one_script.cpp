// MultiLock's single-script path (see one_script.hpp).
#include "multi/one_script.hpp"

#include <string>
#include <string_view>

#include "client/routed.hpp"
#include "client/slots.hpp"
#include "lock/lock_impl.hpp"
#include "lock/orphans.hpp"
#include "multi/give_back.hpp"

namespace lockon::detail {
namespace {

constexpr std::string_view kOperation = "acquire several keys in one script";


bool same_acquisition(const LockOptions& a, const LockOptions& b) {
  return a.ttl == b.ttl && a.no_expiry == b.no_expiry && a.fencing == b.fencing && a.token == b.token &&
         a.holder_record == b.holder_record && a.holder_label == b.holder_label &&
         a.replica_acks.replicas == b.replica_acks.replicas;
}

}  // namespace

bool OneScriptAcquisition::eligible(const Locks& locks) {
  if (locks.size() < 2) return false;  // one key: the Lock's SET NX fast path is cheaper than a script
  std::vector<const Lock*> plain;
  for (const auto& lock : locks) {
    const auto* single = dynamic_cast<const Lock*>(lock.get());
    if (single == nullptr) return false;  // Redlock or another backend: ordered path
    plain.push_back(single);
  }
  const Lock::Impl& first = *plain.front()->impl_;
  if (first.options().replica_acks.replicas > 0) return false;  // the script does not WAIT for replicas
  const bool cluster = first.client_impl()->options().deployment == Deployment::cluster;
  const int slot = key_slot(first.calls().name());
  for (const Lock* lock : plain) {
    const Lock::Impl& impl = *lock->impl_;
    if (impl.client_impl() != first.client_impl()) return false;
    if (!same_acquisition(impl.options(), first.options())) return false;
    // Only a Cluster splits keys between nodes: one script may only touch
    // one slot there. One server or Sentinel's master holds every key.
    if (cluster && key_slot(impl.calls().name()) != slot) return false;
  }
  return true;
}

OneScriptAcquisition::Outcome OneScriptAcquisition::take(const Locks& locks, Clock::time_point deadline) {
  std::vector<Lock::Impl*> impls;
  impls.reserve(locks.size());
  for (const auto& lock : locks) {
    Lock::Impl* impl = static_cast<Lock&>(*lock).impl_.get();
    if (!impl->can_adopt()) return Outcome::unavailable;
    impls.push_back(impl);
  }
  const LockOptions& options = impls.front()->options();
  const std::string token = options.token ? *options.token : lock_token();
  // As a Lock's own acquisition (Orphans::forget): clean-ups of earlier
  // attempts with this custom token run now, never after this one.
  if (options.token) {
    for (const Lock::Impl* impl : impls) {
      if (!Orphans::instance().forget(*impl->client_impl(), impl->calls().name(), token, deadline)) return Outcome::deadline_passed;
    }
  }
  const std::string record = options.holder_record ? holder_record(token, options.holder_label) : std::string();
  const std::string ttl = options.no_expiry ? "0" : std::to_string(options.ttl.count());
  const std::array<std::string_view, 4> args{token, ttl, options.fencing ? "1" : "0", record};
  std::vector<std::string_view> keys;
  keys.reserve(4 * impls.size());
  for (const Lock::Impl* impl : impls) {
    const LockCalls& calls = impl->calls();
    keys.insert(keys.end(), {calls.name(), calls.queue_key(), calls.fence_key(), calls.who_key()});
  }
  // An attempt whose outcome is unknown: each key is released by the
  // clean-up if it holds the token.
  const auto abandon_all = [](const std::vector<Lock::Impl*>& all, const std::string& lost) noexcept {
    for (Lock::Impl* impl : all) impl->abandon_token(lost);
  };
  const Script& script = scripts::acquire_all();
  const auto until = deadline == Clock::time_point::min() ? Clock::time_point::max() : deadline;
  const LockCalls& lead = impls.front()->calls();
  // Sent now: every key's lease is counted from here (it precedes the grant).
  const auto sent_at = Clock::now();
  std::string endpoint;
  ReplyPtr reply;
  try {
    reply = routed_call(*lead.client(), lead.name(), until, [&](Connection& connection, Node& node) -> ReplyPtr {
      endpoint = node.endpoint();
      if (!connection.ensure_connected_by(until)) return nullptr;  // the deadline passed while connecting
      return eval_bounded(connection, script, keys, args, kOperation, until);
    });
  } catch (const ClosedError&) {
    // The connection dropped after sending: whatever the script did is
    // undone by the clean-up; the ordered path retries with fresh tokens.
    // Not with a caller's own token: the ordered path would take the keys
    // with that same token, and the queued clean-up could then release
    // them under the new holder. Fail as a single Lock does in that case.
    abandon_all(impls, token);
    if (options.token) throw;
    return Outcome::unavailable;
  } catch (const IoError&) {
    abandon_all(impls, token);
    throw;
  }
  if (!reply) {
    abandon_all(impls, token);
    return Outcome::deadline_passed;
  }
  check_reply(*reply, endpoint, kOperation);  // a script error ran before any write (see acquire_all)
  const redisReply& r = *reply;
  const bool shaped = r.type == REDIS_REPLY_ARRAY && r.elements >= 1 && r.element[0]->type == REDIS_REPLY_INTEGER;
  if (shaped && r.element[0]->integer == 0 && r.elements == 3)
    return r.element[2]->integer == 2 ? Outcome::queued : Outcome::held;
  if (!shaped || r.element[0]->integer != 1 || r.elements != impls.size() + 1) {
    abandon_all(impls, token);
    throw ProtocolError("acquire lock '" + lead.name() + "' and " + std::to_string(impls.size() - 1) +
                        " more on " + endpoint + ": unexpected script reply");
  }
  // Every key is ours: each Lock adopts its part. A key whose lease can no
  // longer be proven (a pause past half the ttl, then lost) undoes all.
  std::size_t adopted = 0;
  try {
    for (; adopted < impls.size(); ++adopted) {
      const auto fence = static_cast<std::uint64_t>(r.element[adopted + 1]->integer);
      if (!impls[adopted]->adopt(token, record, fence, sent_at)) break;
    }
  } catch (...) {
    give_back(locks, adopted, deadline);
    for (std::size_t i = adopted; i < impls.size(); ++i) impls[i]->abandon_token(token);
    throw;
  }
  if (adopted == impls.size()) return Outcome::taken;
  give_back(locks, adopted, deadline);
  for (std::size_t i = adopted + 1; i < impls.size(); ++i) impls[i]->abandon_token(token);
  return Outcome::unavailable;
}

}  // namespace lockon::detail
