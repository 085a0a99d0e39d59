#!/usr/bin/env bash
# A/B of decode settings in one call on the GPU machine: for each shape, runs
# `amk-run --bench` (bf16, random weights, --max-seq 2048, median of 128
# steps after 10 warm-up steps, --check in the same run, --trace) once per
# variant and round, variants interleaved so that a drift of the card shows
# as a spread within a variant rather than as a difference between them.
# Prints one table (ms per position, check, the trace's chain summary),
# then, per shape, each variant's tasks by kind against the first variant's
# (round 1, utils/trace-diff.py --kinds-only).
#
#   utils/bench-ab.sh -s "llama-3.2-1b smollm2-135m" -r 2 \
#       base: AMK_FUSE_SPLIT_DOWN=0 -- mlp: AMK_FUSE_SPLIT_DOWN=1
#
# A variant is `NAME:` followed by VAR=VALUE words (none: the defaults);
# `--` separates variants; AMK_BUILD=DIR in a variant runs DIR/bin/amk-run.
# -s: shapes (examples/configs/NAME; default
# llama-3.2-1b); -r: rounds (default 2); -a: more amk-run arguments for every
# run (-a "--quant int8"); -d: delete the traces after the tables (megabytes
# each: a device call brings back only so much); -p: every run with
# AMK_CUDA_TRACE_PHASES=1 (a build of its own: time without it), and after the
# tables each variant's phase table of its round 1 (its first traced launch:
# inputs staged, weight loop, signal). The 1B shape is timed at positions
# 0 and 1024, the others at 0. Environment: AMK_BUILD (default build), OUT
# (logs and traces; default /tmp/amk-bench-ab).
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${AMK_BUILD:-build}/bin
LOG=${OUT:-/tmp/amk-bench-ab}
mkdir -p "$LOG"
export AMK_CACHE_DIR=${AMK_CACHE_DIR:-$LOG/cubin-cache}
shapes="llama-3.2-1b"
rounds=2
extra=""
drop_traces=0
phases=0
while getopts "s:r:a:dp" opt; do
  case $opt in
    s) shapes=$OPTARG ;;
    r) rounds=$OPTARG ;;
    a) extra=$OPTARG ;;
    d) drop_traces=1 ;;
    p) phases=1 ;;
    *) echo "usage: $0 [-s SHAPES] [-r ROUNDS] [-a ARGS] [-d] [-p] NAME: [VAR=VALUE ...] [-- NAME: ...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
names=()
envs=()
cur_name=""
cur_env=""
for w in "$@" --; do
  if [ "$w" = -- ]; then
    if [ -n "$cur_name" ]; then names+=("$cur_name"); envs+=("$cur_env"); fi
    cur_name=""; cur_env=""
  elif [ -z "$cur_name" ]; then
    case $w in
      *:) cur_name=${w%:} ;;
      *) echo "bench-ab: a variant starts with NAME:, not '$w'" >&2; exit 2 ;;
    esac
  else
    case $w in
      [A-Za-z_]*=*) cur_env="$cur_env $w" ;;
      *) echo "bench-ab: '$w' in variant $cur_name is not VAR=VALUE" >&2; exit 2 ;;
    esac
  fi
done
[ ${#names[@]} -eq 0 ] && names=(default) && envs=("")

for shape in $shapes; do
  case $shape in llama-3.2-1b) pos=0,1024 ;; *) pos=0 ;; esac
  for ((r = 1; r <= rounds; r++)); do
    for i in "${!names[@]}"; do
      n=${names[$i]}
      tag="$shape.$n.$r"
      # A variant's AMK_BUILD=DIR runs DIR's amk-run (another build: an
      # A/B across commits in one call).
      bin=$BIN
      for w in ${envs[$i]}; do
        case $w in AMK_BUILD=*) bin=${w#AMK_BUILD=}/bin ;; esac
      done
      phase_env=""
      [ "$phases" = 1 ] && phase_env=AMK_CUDA_TRACE_PHASES=1
      # shellcheck disable=SC2086 # $extra: words
      env $phase_env ${envs[$i]} timeout 300 "$bin/amk-run" "examples/configs/$shape" --random-weights 1 \
        --dtype bf16 --max-seq 2048 --bench --bench-pos "$pos" --bench-steps 128 --bench-warmup 10 \
        --json --trace "$LOG/$tag.trace.json" $extra >"$LOG/$tag.log" 2>&1
      echo "$tag rc=$?"
    done
  done
done

python3 - "$LOG" "$rounds" "$shapes" "${names[@]}" <<'PY'
import json, os, sys
log, rounds, shapes, names = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
print()
print("| shape | variant | round | pos: ms (% read bw) | check | chain |")
print("|---|---|---|---|---|---|")
for s in shapes:
    for n in names:
        for r in range(1, rounds + 1):
            p = os.path.join(log, f"{s}.{n}.{r}.log")
            text = open(p).read() if os.path.exists(p) else ""
            js = [l for l in text.splitlines() if l.startswith("{")]
            chain = next((l.strip() for l in text.splitlines() if l.startswith("trace:") and "chain" in l), "")
            if not js:
                tail = " / ".join(text.strip().splitlines()[-2:])[:160]
                print(f"| {s} | {n} | {r} | no result: {tail} | | |")
                continue
            o = json.loads(js[-1])
            cells = ", ".join(f"{x['pos']}: {x['median_ms']:.4f} ({x['pct_read_bw']:.1f}%)" for x in o["results"])
            checks = ",".join(sorted({x["check"] for x in o["results"]}))
            print(f"| {s} | {n} | {r} | {cells} | {checks} | {chain} |")
PY

# Where each variant's time went against the first's, kind by kind (round 1).
for shape in $shapes; do
  first=$LOG/$shape.${names[0]}.1.trace.json
  for n in "${names[@]:1}"; do
    other=$LOG/$shape.$n.1.trace.json
    if [ -s "$first" ] && [ -s "$other" ]; then
      echo
      echo "$shape, round 1: ${names[0]} (A) -> $n (B)"
      python3 utils/trace-diff.py --kinds-only "$first" "$other"
    fi
  done
done
# With -p, each variant's first phase table (round 1).
if [ "$phases" = 1 ]; then
  for shape in $shapes; do
    for n in "${names[@]}"; do
      echo
      echo "$shape, $n, round 1: phases (mean us)"
      awk '/^trace: phases of a run/ { on = 1; next } on && /^\|/ { print; next } on { exit }' \
        "$LOG/$shape.$n.1.log"
    done
  done
fi
if [ "$drop_traces" = 1 ]; then
  rm -f "$LOG"/*.trace.json "$LOG"/*.trace.*.json
fi
