#!/usr/bin/env bash
# Builds and runs the unit and integration tests under sanitizers:
#   scripts/sanitize.sh asan    ASan + UBSan (preset asan)
#   scripts/sanitize.sh tsan    ThreadSanitizer (preset tsan; suppressions
#                               for uninstrumented libraries: tests/tsan.supp)
#   scripts/sanitize.sh [both]  both, asan first
# Extra arguments after the mode go to ctest (e.g. -R 'integration\.Lock').
# Idempotent: rebuilds only what changed. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-both}"
[ $# -gt 0 ] && shift
case "$mode" in
  asan) presets=(asan) ;;
  tsan) presets=(tsan) ;;
  both) presets=(asan tsan) ;;
  *) echo "sanitize.sh: expected asan, tsan or both, got '$mode'" >&2; exit 64 ;;
esac

./scripts/setup-deps.sh >/dev/null
# A sanitizer finding in a test or its child processes fails that test
# (UBSan halts: the presets build with -fno-sanitize-recover=undefined).
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"

# Runs a command silently; shows its output only if it fails.
quietly() {
  local log
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

for preset in "${presets[@]}"; do
  echo "sanitize: $preset: build"
  quietly cmake --preset "$preset"
  quietly cmake --build --preset "$preset" --target lockon_unit_tests lockon_integration_tests lockon_async_tests
  echo "sanitize: $preset: unit + integration (+ async under ASan) tests"
  if [ "$preset" = tsan ]; then
    # TSan's lock-order checker tracks at most 64 mutexes held by one thread
    # and aborts ("CHECK failed: sanitizer_deadlock_detector.h:67") beyond.
    # The watchdog holds every due lease's mutex during one renewal round
    # (src/lock/watchdog.cpp renew_due), so tests with more than 64 leases due at
    # once run with the lock-order checker off; races are still detected.
    many_locks='^integration\.LockWaiting\.ThousandWaitersOnAHundredKeysShareOnePubSubConnection$'
    # TSan refuses to start a thread in the child of a multi-threaded fork()
    # ("starting new threads after multi-threaded fork is not supported"), and
    # lockon's fork handling starts fresh threads there: those tests run in
    # stage 1 of test.sh only, and are named here.
    tsan_fork_tests='^integration\.(Fork\.|WatchdogFaults\.ForkedChild|AutoPipelineAttack\.ForkWhileTheIoThreadIsBusy|HotPath\.AForkedChild)'
    echo "sanitize: tsan: not run under this sanitizer (TSan refuses threads after fork): $tsan_fork_tests"
    ctest --preset tsan -R '^(unit|integration|async)\.' -E "$many_locks|$tsan_fork_tests" "$@"
    LOCKON_TSAN_OPTIONS=detect_deadlocks=0 ctest --preset tsan -R "$many_locks" "$@"
  else
    # Left out under ASan (diagnosed, docs/verification.md): gcc 12's libasan
    # has no fork handler for its allocator, so a parent thread inside
    # malloc at fork() leaves a size-class mutex locked in the child; the
    # child's first new thread (lockon's renewal lane) blocks on it forever in
    # AsanThread::Init, and the child's lease lapses. glibc's own malloc locks
    # its arenas around fork(), so the tests pass in stage 1 of test.sh (TSan
    # cannot run them either: see above); they are listed below, not hidden.
    # Also timing-bound: the stall test's 300 ms socket timeout is too tight
    # for ASan's slowdown on a loaded 2-core machine (it passes in stage 1).
    # AutoPipelineAttack.ForkWhileTheIoThreadIsBusy forks while six threads
    # allocate: exactly the case above.
    # The CLI's latency bounds (`lockon run -n` answers within 1 s, `-w 1s`
    # gives up within 2 s) are checked in stage 1: an ASan-built lockon
    # beside the 200-run CLI tests at ctest -j4 was held back 0.7-2 s for two
    # minutes (docs/verification.md, session 26); the same code runs under
    # ASan in the other CLI tests.
    fork_tests='^integration\.(Fork\.|WatchdogFaults\.ForkedChild|LockSafety\.WaitersTimedOutDuringAStall|AutoPipelineAttack\.ForkWhileTheIoThreadIsBusy|CliRun\.NonblockOnAHeldLockExitsWithTheConflictCodeAtOnce|CliRun\.WaitGivesUpAfterTheGivenDuration)'
    echo "sanitize: $preset: not run under this sanitizer (libasan fork limitation; CLI latency bounds: stage 1; see docs/verification.md): $fork_tests"
    ctest --preset "$preset" -R '^(unit|integration|async)\.' -E "$fork_tests" "$@"
  fi
done
