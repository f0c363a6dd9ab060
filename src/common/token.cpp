#include "common/token.hpp"

#include <openssl/rand.h>
#include <pthread.h>

#include <array>
#include <atomic>
#include <memory>

#include "common/fork.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

// RAND_bytes costs ~1 µs per call in OpenSSL 3 whatever the size, more than
// the rest of an uncontended lock cycle's client work. Each thread draws a
// block of CSPRNG output at once and hands it out 16 bytes at a time. The
// bytes are the same CSPRNG output, only fetched earlier.
constexpr std::size_t kBlockBytes = 1024;

// A forked child must not hand out bytes its parent also holds: atfork bumps
// the generation and every thread's buffer is then discarded.
std::atomic<unsigned> fork_generation{0};
void on_fork_child() { fork_generation.fetch_add(1, std::memory_order_relaxed); }
const int atfork_registered = pthread_atfork(nullptr, nullptr, &on_fork_child);

struct RandomBlock {
  std::array<unsigned char, kBlockBytes> bytes{};
  std::size_t used = kBlockBytes;
  unsigned generation = 0;

  unsigned char* take(std::size_t n) {
    const unsigned current = fork_generation.load(std::memory_order_relaxed);
    if (used + n > bytes.size() || generation != current) {
      if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1)
        throw Error("OpenSSL RAND_bytes failed: no secure randomness for lock tokens");
      used = 0;
      generation = current;
    }
    unsigned char* out = bytes.data() + used;
    used += n;
    return out;
  }
};

}  // namespace

void assign_random_hex(std::string& out, std::size_t bytes) {
  static_cast<void>(atfork_registered);
  if (bytes == 0 || bytes > 64) throw ConfigError("random_hex: byte count out of range");
  thread_local RandomBlock block;
  unsigned char* raw = block.take(bytes);
  static constexpr char kHex[] = "0123456789abcdef";
  out.resize(bytes * 2);
  for (std::size_t i = 0; i < bytes; ++i) {
    out[2 * i] = kHex[raw[i] >> 4];
    out[2 * i + 1] = kHex[raw[i] & 0xF];
    raw[i] = 0;  // handed-out bytes do not linger in the buffer
  }
}

std::string random_hex(std::size_t bytes) {
  std::string hex;
  assign_random_hex(hex, bytes);
  return hex;
}

namespace {

// This process image's nonce, redrawn on first use in a forked child (a
// child's locks are its own: its waiters must not count the parent's holds
// as theirs). ForkLocal: lock-free, so a fork while another thread reads it
// cannot leave a frozen mutex behind. Leaked: used from static destructors.
const std::string& nonce_for_this_process() {
  constexpr std::size_t kNonceBytes = 6;  // 48 bits
  const auto draw = [] { return std::make_unique<std::string>(random_hex(kNonceBytes)); };
  static auto& nonce = *new ForkLocal<std::string>(draw);
  return nonce.get(draw);
}

}  // namespace

void assign_lock_token(std::string& out) {
  const std::string& nonce = nonce_for_this_process();
  assign_random_hex(out);
  out.push_back('.');
  out.append(nonce);
}

std::string lock_token() {
  std::string token;
  assign_lock_token(token);
  return token;
}

std::string subscriber_or_process_id(std::string subscriber_id) {
  if (!subscriber_id.empty()) return subscriber_id;
  return "-." + nonce_for_this_process();
}

std::string new_subscriber_id() {
  std::string id = random_hex(8);
  id.push_back('.');
  id.append(nonce_for_this_process());
  return id;
}

}  // namespace lockon::detail
