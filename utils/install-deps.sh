#!/usr/bin/env bash
# Installs the Debian packages the build and the tests need, only those
# missing. Safe to run again.
set -euo pipefail

# help2man writes the man pages from each tool's --help; pkg-config is what
# the install test links a program through; graphviz draws --emit=dot;
# nettle-dev gives the SHA-256 of the cubin cache's keys.
# clang-14 and libclang-rt-14-dev (libFuzzer and clang's sanitizer runtimes,
# only recommended by clang, so named) build the fuzz drivers (utils/fuzz.sh);
# tmux lets test/run/chat-tmux.test type into amk-run -cnv in a terminal.
packages=(cmake ninja-build gcc libc6-dev re2c bison libcjson-dev libpcre2-dev llvm-14-tools python3
          xz-utils clang-14 libclang-rt-14-dev tmux help2man pkg-config graphviz nettle-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
