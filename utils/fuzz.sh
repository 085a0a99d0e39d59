#!/usr/bin/env bash
# Builds the fuzz drivers with libFuzzer, ASan and UBSan (clang, in its own
# tree) and runs each for a bounded time over its seed corpus
# (docs/Testing.md, "Fuzzing"):
#
#   utils/fuzz.sh                    every target, AMK_FUZZ_SECONDS (45) each
#   utils/fuzz.sh TARGET [SECONDS]   one target, longer (default 600 s)
#
# Inputs that found new coverage go to BUILD/fuzz-corpus/TARGET (kept across
# runs); the seeds, fuzz/corpus/TARGET and test/fuzz/Inputs/TARGET, are only
# read. A crash, leak, UBSan report, timeout (AMK_FUZZ_TIMEOUT, 10 s an
# input) or a broken property fails the run: the reproducer is saved under
# BUILD/fuzz-artifacts/TARGET/ and the commands that replay it are printed.
# BUILD is AMK_FUZZ_BUILD (build-fuzz/); the compiler AMK_FUZZ_CC, else
# clang-14, else clang.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${AMK_FUZZ_BUILD:-$root/build-fuzz}"
timeout_s="${AMK_FUZZ_TIMEOUT:-10}"
max_len="${AMK_FUZZ_MAX_LEN:-8192}"
rss_mb="${AMK_FUZZ_RSS_MB:-2048}"

cc=""
for candidate in "${AMK_FUZZ_CC:-}" clang-14 clang; do
  if [ -n "$candidate" ] && command -v "$candidate" >/dev/null; then
    cc="$candidate"
    break
  fi
done
if [ -z "$cc" ]; then
  echo "fuzz.sh: no clang found (utils/install-deps.sh installs clang-14 and libclang-rt-14-dev)" >&2
  exit 1
fi

CC="$cc" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DAMK_FUZZ=ON >/dev/null
# Only the drivers (and the library): the tools are not fuzzed.
if ! log=$(ninja -C "$build" fuzzers 2>&1); then
  printf '%s\n' "$log" >&2
  exit 1
fi
mapfile -t all_targets < "$build/fuzz/targets.txt"

if [ $# -ge 1 ]; then
  targets=("$1")
  seconds="${2:-600}"
  if ! printf '%s\n' "${all_targets[@]}" | grep -qx -- "$1"; then
    echo "fuzz.sh: unknown target '$1' (known: ${all_targets[*]})" >&2
    exit 2
  fi
else
  targets=("${all_targets[@]}")
  seconds="${AMK_FUZZ_SECONDS:-45}"
fi

status=0
for t in "${targets[@]}"; do
  work="$build/fuzz-corpus/$t"
  artifacts="$build/fuzz-artifacts/$t"
  log="$build/fuzz-logs/$t.log"
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  dict=()
  [ -f "$root/fuzz/dict/$t.dict" ] && dict=(-dict="$root/fuzz/dict/$t.dict")
  # The inputs of fixed defects are seeds too: a regression fails at once.
  seeds=("$root/fuzz/corpus/$t")
  [ -d "$root/test/fuzz/Inputs/$t" ] && seeds+=("$root/test/fuzz/Inputs/$t")
  echo "== fuzz $t (${seconds} s)"
  # -rss_limit_mb also bounds any single allocation (-malloc_limit_mb).
  if "$build/bin/fuzz_$t" "${dict[@]}" -max_total_time="$seconds" \
      -timeout="$timeout_s" -rss_limit_mb="$rss_mb" -max_len="$max_len" \
      -artifact_prefix="$artifacts/" -print_final_stats=1 \
      "$work" "${seeds[@]}" > "$log" 2>&1; then
    grep -E '^(stat::number_of_executed_units|stat::new_units_added)' "$log" |
      sed 's/^stat::/   /' || true
  else
    status=1
    tail -n 60 "$log"
    reproducer=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    echo "fuzz.sh: fuzz_$t FAILED; the whole log is $log"
    if [ -n "$reproducer" ]; then
      echo "fuzz.sh: reproducer: $reproducer"
      echo "fuzz.sh: replay it:  $build/bin/fuzz_$t $reproducer"
      echo "fuzz.sh:   or in the gcc ASan tree: $root/build-asan/bin/fuzz_$t $reproducer"
    fi
  fi
done
exit $status
