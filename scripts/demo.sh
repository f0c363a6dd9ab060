#!/usr/bin/env bash
# The main job: the withdrawal demo. Uses $LOCKON_REDIS_URL if set, else
# starts a throwaway local redis-server. Extra arguments go to the demo
# (try --no-lock to see the corruption the lock prevents; --help).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh >/dev/null
cmake --preset release >/dev/null
cmake --build --preset release --target withdraw >/dev/null
exec ./build/release/examples/withdraw "$@"
