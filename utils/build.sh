#!/usr/bin/env bash
# Configures and builds one tree: utils/build.sh [BUILD_DIR [extra cmake args]]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/build}"
shift || true
cmake -S "$root" -B "$dir" -G Ninja "$@" >/dev/null
# Quiet on success; on failure the compiler's messages (ninja prints them
# on stdout) are shown.
if ! log=$(ninja -C "$dir" 2>&1); then
  printf '%s\n' "$log" >&2
  exit 1
fi
