#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds everything (library,
# tests, benchmarks, examples, tool) and runs every test against throwaway
# redis-server processes that the tests start and stop themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
cmake --preset ci >/dev/null
cmake --build --preset ci
ctest --preset ci "$@"
