#!/usr/bin/env bash
# Fault verification (docs/verification.md): builds lockon_verify (ci preset),
# runs worker processes against a fenced resource while a nemesis injects
# faults on a seeded schedule, then checks the history. Prints the seed and
# the figures; exits non-zero on any violation.
#
#   scripts/verify.sh [--minutes N] [--seconds N] [--seed S] [--dir D] [any lockon_verify run option]
#   scripts/verify.sh --topology sentinel ...   # a master, 2 replicas, 3 sentinels, failovers
#   scripts/verify.sh --topology cluster ...    # a Redis Cluster (3 masters + replicas), slot migrations, failovers
#
# Default 2 minutes and a random seed (printed first); --seed S replays a
# schedule. The history stays in the printed directory for `lockon_verify check --dir D`.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=120
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --minutes) seconds=$(( $2 * 60 )); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) args+=("$1" "$2"); shift 2 ;;
  esac
done
./scripts/setup-deps.sh >/dev/null
cmake --preset ci >/dev/null
cmake --build --preset ci --target lockon_verify
exec ./build/ci/tests/verify/lockon_verify run --seconds "$seconds" "${args[@]}"
