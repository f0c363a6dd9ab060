// integration/test_name_limit.cpp — lock names are bounded (issue 33, §5):
// kMaxNameBytes (64 KiB, lockon/name.hpp), refused with ConfigError at
// construction by every primitive and the CLI, through one check
// (lockon::validate_name). Before it, a 32 MiB name was accepted: a
// blocking release() threw TimeoutError after 5.2-5.5 s and left the key
// held for its TTL. A name of exactly the limit works end to end.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <typeinfo>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lockon/locker.hpp"
#include "lockon/multi_lock.hpp"
#include "lockon/name.hpp"
#include "lockon/read_write_lock.hpp"
#include "lockon/redlock.hpp"
#include "lockon/semaphore.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// `tag` padded with 'x' to exactly `bytes` bytes (a unique prefix).
std::string name_of_size(const std::string& tag, std::size_t bytes) {
  std::string name = unique_key(tag);
  name.resize(bytes, 'x');
  return name;
}

// `make` must throw ConfigError quickly, with a short message that gives
// the limit and never the whole name.
template <class F>
void expect_refused(F&& make, std::size_t name_bytes) {
  const auto start = Clock::now();
  try {
    make();
    ADD_FAILURE() << "a " << name_bytes << "-byte name was accepted";
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(std::to_string(kMaxNameBytes)), std::string::npos) << message;
    EXPECT_LT(message.size(), 1024u) << "the message carries the name";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong class " << typeid(e).name() << ": " << e.what();
  }
  EXPECT_LT(Clock::now() - start, 2s) << "refused without I/O";
}

class NameLimit : public RedisTest {};

TEST_F(NameLimit, EveryPrimitiveRefusesANameOverTheLimitAtConstruction) {
  Client client(server().url());
  const std::string over = name_of_size("over", kMaxNameBytes + 1);
  expect_refused([&] { Lock lock(client, over); }, over.size());
  expect_refused([&] { ReadWriteLock rw(client, over); }, over.size());
  expect_refused([&] { Semaphore permits(client, over, 3); }, over.size());
  expect_refused([&] { MultiLock multi(client, {unique_key("ok"), over}); }, over.size());
  expect_refused([&] { Redlock redlock(std::vector<Client>{client}, over); }, over.size());
  // lock_on: its keys start with the policy's prefix.
  LockerPolicy policy;
  policy.key_prefix = over;
  expect_refused([&] { RedisLocker locker(client, policy); }, over.size());
}

TEST_F(NameLimit, AThirtyTwoMebibyteNameIsRefusedAtOnceAndNothingIsWritten) {
  Client client(server().url());
  const std::string huge = name_of_size("huge", 32u << 20);
  expect_refused([&] { Lock lock(client, huge); }, huge.size());
  EXPECT_EQ(server().command({"EXISTS", huge}).integer, 0);
}

TEST_F(NameLimit, ANameOfExactlyTheLimitLocksAndReleasesWithinItsDeadlines) {
  Client client(server().url());
  const std::string name = name_of_size("max", kMaxNameBytes);
  ASSERT_EQ(name.size(), kMaxNameBytes);
  const auto start = Clock::now();
  Lock lock(client, name);
  ASSERT_TRUE(lock.try_lock_for(2s));
  EXPECT_EQ(server().command({"EXISTS", name}).integer, 1);
  lock.release();
  EXPECT_EQ(server().command({"EXISTS", name}).integer, 0);
  ReadWriteLock rw(client, name_of_size("max-rw", kMaxNameBytes));
  ASSERT_TRUE(rw.try_lock_shared());
  rw.unlock_shared();
  Semaphore permits(client, name_of_size("max-sem", kMaxNameBytes), 2);
  ASSERT_TRUE(permits.try_acquire());
  permits.release();
  // Generous (a shared 2-core VM): a 32 MiB name took > 5 s for the release alone.
  EXPECT_LT(Clock::now() - start, 4s);
}

#ifdef LOCKON_CLI
TEST_F(NameLimit, TheCliRefusesANameOverTheLimitAsAUsageError) {
  const std::string over = name_of_size("cli", kMaxNameBytes + 1);  // < 128 KiB: one argv string
  for (const std::vector<std::string>& args : {std::vector<std::string>{"status", "--url", server().url(), over},
                                               std::vector<std::string>{"release", "--url", server().url(), over},
                                               std::vector<std::string>{"run", "--url", server().url(), over,
                                                                        "--", "true"}}) {
    std::vector<std::string> argv{LOCKON_CLI};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult r = run_process(argv, 20s, {});
    EXPECT_EQ(r.exit_code, 64) << args[0] << ": " << r.describe();
    EXPECT_NE(r.err.find(std::to_string(kMaxNameBytes)), std::string::npos) << args[0] << ": " << r.err.substr(0, 300);
    EXPECT_LT(r.err.size(), 2048u) << args[0] << ": the name was printed";
  }
}
#endif

}  // namespace
}  // namespace lockon::test
