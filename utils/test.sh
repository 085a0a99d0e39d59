#!/usr/bin/env bash
# Runs every test: installs what is missing, builds the normal tree (build/)
# and an AddressSanitizer + UndefinedBehaviorSanitizer tree (build-asan/), and
# runs the whole lit suite (lit tests and C unit tests) on both. Tests that need
# ../shared or a GPU skip cleanly without them. Then builds the fuzz drivers
# with libFuzzer + ASan + UBSan (clang, build-fuzz/) and runs each for
# AMK_FUZZ_SECONDS (45) over its seeds (utils/fuzz.sh; AMK_FUZZ_SECONDS=0
# skips it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
utils/install-deps.sh

lit=/usr/lib/llvm-14/build/utils/lit/lit.py
jobs="${AMK_TEST_JOBS:-$(nproc)}"
status=0

echo "== build (RelWithDebInfo, -Werror)"
utils/build.sh "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== tests (build)"
python3 "$lit" -sv -j "$jobs" "$root/build/test" || status=1

echo "== build (ASan + UBSan)"
utils/build.sh "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug -DAMK_SANITIZE=ON
echo "== tests (build-asan)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
  python3 "$lit" -sv -j "$jobs" "$root/build-asan/test" || status=1

fuzz_seconds="${AMK_FUZZ_SECONDS:-45}"
if [ "$fuzz_seconds" != 0 ]; then
  echo "== fuzz (libFuzzer + ASan + UBSan, $fuzz_seconds s a target)"
  AMK_FUZZ_SECONDS="$fuzz_seconds" utils/fuzz.sh || status=1
fi

if [ $status -eq 0 ]; then echo "== all tests passed"; else echo "== TESTS FAILED"; fi
exit $status
