#!/usr/bin/env bash
# Where one decode launch's warps wait, per variant, in one command on the GPU
# machine: Nsight Compute samples the fourth launch of a shape's decode
# (WarpStateStats and SourceCounters only, clocks as they run), and
# utils/ncu-sass.py reads its per-instruction page against the program's
# cubin and generated source, both compiled from the very program that ran,
# then cuts the variants with the most samples into their loops and
# straight-line runs (--segments).
#
#   utils/ncu-profile.sh [-a ARGS] [-n TOP] [-k] SHAPE
#
# SHAPE: examples/configs/SHAPE (random weights, bf16, --max-seq 2048);
# -a: more amk-run arguments (-a "--quant int4"); -n: the variants to cut
# into segments (default 2); -k: keep the report and its CSV (megabytes:
# a device call brings back only so much; by default only the tables and
# the program's source stay). Environment: AMK_BUILD (default build), NCU
# (default ncu, else /usr/local/cuda/bin/ncu), OUT (default /tmp/amk-ncu).
# Prints the tables; the files are in $OUT. Exit 1 when a step fails (its
# log's tail printed), 2 on bad usage.
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${AMK_BUILD:-build}/bin
DIR=${OUT:-/tmp/amk-ncu}
NCU=${NCU:-}
if [ -z "$NCU" ]; then
  NCU=$(command -v ncu || true)
  [ -z "$NCU" ] && [ -x /usr/local/cuda/bin/ncu ] && NCU=/usr/local/cuda/bin/ncu
fi
extra=""
top=2
keep=0
usage() { echo "usage: $0 [-a ARGS] [-n TOP] [-k] SHAPE" >&2; exit 2; }
while getopts "a:n:k" opt; do
  case $opt in
    a) extra=$OPTARG ;;
    n) top=$OPTARG ;;
    k) keep=1 ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
shape=$1
case $top in ''|*[!0-9]*) echo "ncu-profile: -n takes a count, not '$top'" >&2; exit 2 ;; esac
if [ ! -d "examples/configs/$shape" ]; then
  echo "ncu-profile: no shape examples/configs/$shape" >&2
  exit 2
fi
if [ -z "$NCU" ]; then
  echo "ncu-profile: no ncu (set NCU to Nsight Compute's command line)" >&2
  exit 1
fi
mkdir -p "$DIR" || exit 1

fail() { # step, log
  echo "ncu-profile: $1 failed; the end of $2:" >&2
  tail -n 15 "$2" >&2
  exit 1
}

# shellcheck disable=SC2206 # $extra: words
run=("examples/configs/$shape" --random-weights 1 --dtype bf16 --max-seq 2048 --device cuda
     --prompt-ids 1 $extra)
# The program as the profiled run compiles it, then its source and cubin.
"$BIN/amk-run" "${run[@]}" -n 1 --save-program "$DIR/program.amkir" >"$DIR/save.log" 2>&1 ||
  fail "saving the program" "$DIR/save.log"
{ "$BIN/amk-opt" "$DIR/program.amkir" --emit=cuda -o "$DIR/kernel.cu" &&
  "$BIN/amk-opt" "$DIR/program.amkir" --emit=cubin -o "$DIR/kernel.cubin"; } >"$DIR/emit.log" 2>&1 ||
  fail "amk-opt --emit" "$DIR/emit.log"
# One launch (the fourth: the first ones compile and warm up), replayed for
# minutes, so the watchdog waits that long.
AMK_CUDA_TIMEOUT_MS=600000 timeout "${AMK_NCU_TIMEOUT:-480}" "$NCU" --clock-control none \
  -k regex:amk_megakernel --launch-skip 3 --launch-count 1 --section WarpStateStats \
  --section SourceCounters -f -o "$DIR/report" "$BIN/amk-run" "${run[@]}" -n 6 \
  >"$DIR/ncu.log" 2>&1 || fail "ncu" "$DIR/ncu.log"
"$NCU" -i "$DIR/report.ncu-rep" --page source --csv --print-source sass >"$DIR/sass.csv" \
  2>"$DIR/export.log" || fail "exporting the source page" "$DIR/export.log"

sass() { python3 utils/ncu-sass.py "$DIR/sass.csv" --cubin "$DIR/kernel.cubin" --cuda "$DIR/kernel.cu" "$@"; }
sass >"$DIR/summary.md" 2>"$DIR/sass.log" || fail "ncu-sass.py" "$DIR/sass.log"
cat "$DIR/summary.md"
# The variants with the most samples, in the summary's order.
for f in $(grep -o '^| amk_v[0-9]* ' "$DIR/summary.md" | awk '{print $2}' | head -n "$top"); do
  echo
  sass --top 0 --segments "$f" 2>>"$DIR/sass.log" | sed -n '/^segments of/,/^$/p'
done
if [ "$keep" = 0 ]; then
  rm -f "$DIR/report.ncu-rep" "$DIR/sass.csv"
fi
