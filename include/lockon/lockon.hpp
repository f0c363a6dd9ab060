// lockon/lockon.hpp — everything public in one include.
//
//   #include "lockon/lockon.hpp"
//
//   lockon::RedisLocker locker("redis://127.0.0.1:6379");
//   auto withdraw = locker.lock_on<0>("bank::withdraw", &bank::withdraw);
//   withdraw("card-1", 100);
//
// Where to read next: locker.hpp (RedisLocker), lock_on.hpp (the call
// contract), policy.hpp (retries and deadlines), decorate.hpp (compile-time
// declaration), lock.hpp / redlock.hpp (the locks themselves), key.hpp and
// encoding.hpp (how keys are named), errors.hpp (what can be thrown).
#pragma once

#include "lockon/client.hpp"
#include "lockon/decorate.hpp"
#include "lockon/diagnostics.hpp"
#include "lockon/encoding.hpp"
#include "lockon/errors.hpp"
#include "lockon/key.hpp"
#include "lockon/lock.hpp"
#include "lockon/lock_context.hpp"
#include "lockon/lock_on.hpp"
#include "lockon/locker.hpp"
#include "lockon/md5.hpp"
#include "lockon/metrics.hpp"
#include "lockon/name.hpp"
#include "lockon/multi_lock.hpp"
#include "lockon/options.hpp"
#include "lockon/policy.hpp"
#include "lockon/read_write_lock.hpp"
#include "lockon/redlock.hpp"
#include "lockon/semaphore.hpp"
