#!/usr/bin/env bash
# Installs what lockon needs on Debian 12, only if something is missing.
# Idempotent: a second run installs nothing and prints one line.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libhiredis-dev libssl-dev libasio-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
  redis-server redis-tools
  # Fuzzing (scripts/fuzz.sh, preset fuzz): clang with libFuzzer and its
  # sanitizer runtimes. gcc's ASan/UBSan/TSan runtimes come with gcc.
  clang-16 libclang-rt-16-dev libfuzzer-16-dev
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "lockon: dependencies present."
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "lockon: missing Debian packages: ${missing[*]}" >&2
  echo "lockon: run this script as root (or: sudo apt-get install -y ${missing[*]})." >&2
  exit 1
fi

echo "lockon: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The package may start a system redis on 6379; lockon never relies on it.
echo "lockon: dependencies installed."
