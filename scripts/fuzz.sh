#!/usr/bin/env bash
# Builds the libFuzzer targets (preset `fuzz`: clang-16, ASan + UBSan) and
# runs each on its seed corpus (tests/fuzz/corpus/<target>/) plus a working
# corpus under build/fuzz/corpus/<target>/ that grows between runs.
#
#   scripts/fuzz.sh                      every target, 1 hour each
#   scripts/fuzz.sh --seconds 10         every target, 10 s each (CI)
#   scripts/fuzz.sh --runs 10000000 url  one target, a fixed number of inputs
#
# Targets: url encoding reply cli. A finding stops with a non-zero status and
# leaves the input as build/fuzz/artifacts/<target>/crash-*; reproduce with
#   build/fuzz/tests/fuzz/fuzz_<target> build/fuzz/artifacts/<target>/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=(url encoding reply cli)
seconds=3600
runs=""
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 64 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")
for target in "${targets[@]}"; do
  case " ${all_targets[*]} " in
    *" $target "*) ;;
    *) echo "fuzz.sh: unknown target '$target' (known: ${all_targets[*]})" >&2; exit 64 ;;
  esac
done

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

./scripts/setup-deps.sh >/dev/null
quietly cmake --preset fuzz
quietly cmake --build --preset fuzz --target "${targets[@]/#/fuzz_}"

status=0
for target in "${targets[@]}"; do
  work=build/fuzz/corpus/$target
  artifacts=build/fuzz/artifacts/$target
  mkdir -p "$work" "$artifacts"
  limit=(-max_total_time="$seconds")
  [ -n "$runs" ] && limit=(-runs="$runs")
  log=build/fuzz/$target.log
  echo "fuzz: $target (${runs:+$runs runs}${runs:-$seconds s})"
  if build/fuzz/tests/fuzz/fuzz_"$target" "${limit[@]}" -print_final_stats=1 \
       -artifact_prefix="$artifacts/" "$work" "tests/fuzz/corpus/$target" >"$log" 2>&1; then
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    echo "fuzz: $target ok: ${execs:-?} inputs, ${speed:-?}/s"
  else
    echo "fuzz: $target FAILED (log: $log, inputs: $artifacts/)" >&2
    grep -a -E "PROPERTY VIOLATED|detail:|ERROR:|SUMMARY:" "$log" | head -20 >&2 || true
    status=1
  fi
done
exit $status
