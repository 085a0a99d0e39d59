#!/usr/bin/env bash
# The CUDA backend's whole GPU check in one call (issue 6, items 6 and 7).
#
#   utils/gpu-check.sh [SECTION ...]   run from the repository root on the GPU machine
#
# With SECTIONs (2 3 3b 3c 4 4b 5 6 7), only those run after the environment
# and the smoke runs (which always run: the smoke gates the rest); without,
# every section does. One call's device time rarely fits them all.
#
# Needs the build folder carried (default build/, or $AMK_BUILD): binaries with
# RPATH $ORIGIN/../lib and libcjson.so.1 and libpcre2-8.so.0 beside them in
# build/lib. Fixtures come from $AMK_FIXTURES, else ../shared/fixtures/hf, else
# shared/fixtures/hf (the in-tree examples/llama-tiny is always checked too).
#
# Steps (each bounded by `timeout`, so a hang costs minutes, not the lease):
#   0. environment: nvidia-smi, NVRTC, the driver, the build
#   1. smoke: the in-tree example on the GPU under --check (f32, bf16, unfused);
#      on failure the matrix is skipped and the logs are printed
#   2. compute-sanitizer memcheck of one small run, when the tool is there
#   3. every fixture x {untiled, tiled, fused, round-robin, load-balanced,
#      split-KV} x {f32, bf16}: the golden greedy tokens on the GPU
#      (utils/check_golden.py --device cuda; f32 also the golden logits) and
#      amk-run --check against the reference VM
#   3c. weight-only int8 and int4 (docs/Quantization.md): llama-tiny and every
#      fixture under --check (llama-tiny in f32 and bf16); the 1B and SmolLM2
#      shapes in bf16
#   4. Llama-3.2-1B shape, bf16, random weights: 256 tokens on the GPU under
#      --check, every step compared with the reference VM (which fires tasks
#      on every core; $AMK_1B_CHECK_STEPS limits the steps checked), no hang
#   4b. the watchdog: AMK_CUDA_TEST_STALL=1 makes one wait unreachable in the
#      device tables; the launch must end as TIMEOUT (exit 3), not hang
#   5. --bench at positions 0 and 1024 (Llama-3.2-1B shape, bf16), with one
#      traced launch per position after the timed ones (--trace: where the
#      time went, printed after the summary; the Chrome trace in $OUT)
#   6. GEMM_TILE on the tensor cores (utils/gpu-gemm.sh): the GEMM cases
#      of test/cuda/Inputs/gemm_case.py under --check and against their
#      independent reference, and the 512 x 8192 x 2048 bf16 GEMM's TFLOP/s
#   7. prefill programs on the GPU under --check (each chunk's last logits
#      row against the reference VM's prefill of the same chunk, then every
#      decode step; the fused decode program takes each chunk's KV rows
#      device to device): llama-tiny f32/bf16 (also without fuse, on
#      shared caches), llama-tiny --quant int8/int4 in f32 and bf16 (the
#      quantized GEMM tiles), every fixture of AMK_FIXTURES and
#      the families (golden prompt, -b 4: chunks and a remainder), and the
#      1B shape with random weights and a 600-token prompt, -b 512 (a chunk
#      of 512 rows and one of 87 padded to 512, then the last token by the
#      decode program)
# Full logs go to $OUT (or /tmp/amk-gpu-check); a summary table is printed last.
set -u
cd "$(dirname "$0")/.." || exit 1
SECTIONS=("$@")
for sec in "${SECTIONS[@]}"; do
  case $sec in
    2 | 3 | 3b | 3c | 4 | 4b | 5 | 6 | 7) ;;
    *) echo "gpu-check.sh: error: no section '$sec' (sections: 2 3 3b 3c 4 4b 5 6 7)" >&2; exit 2 ;;
  esac
done
# Whether section $1 runs.
want() {
  [ ${#SECTIONS[@]} -eq 0 ] && return 0
  local sec
  for sec in "${SECTIONS[@]}"; do [ "$sec" = "$1" ] && return 0; done
  return 1
}
ROOT=$PWD
BUILD=${AMK_BUILD:-build}
BIN=$ROOT/$BUILD/bin
LOG=${OUT:-/tmp/amk-gpu-check}
mkdir -p "$LOG"
export AMK_CACHE_DIR=${AMK_CACHE_DIR:-$LOG/cubin-cache}
export AMK_CUDA_TIMEOUT_MS=${AMK_CUDA_TIMEOUT_MS:-20000}
STEP_TIMEOUT=${AMK_STEP_TIMEOUT:-180}
CHECK_1B=${AMK_1B_CHECK_STEPS:-256}
SUMMARY=$LOG/summary.txt
: >"$SUMMARY"
FAILS=0
T0=$(date +%s)

row() { # status, what, detail
  printf '| %-7s | %-58s | %s\n' "$1" "$2" "$3" | tee -a "$SUMMARY" >/dev/null
  [ "$1" = PASS ] || [ "$1" = SKIP ] || [ "$1" = INFO ] || FAILS=$((FAILS + 1))
}
# Runs a command with a time limit, its output in $LOG/$1.log; echoes the status.
run_logged() {
  local name=$1
  shift
  timeout --kill-after=10 "$STEP_TIMEOUT" "$@" >"$LOG/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo HANG; elif [ $rc -eq 3 ]; then echo TIMEOUT
  elif [ $rc -eq 0 ]; then echo PASS; else echo FAIL; fi
}

echo "== 0. environment"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1
  ls -la "$BIN" "$ROOT/$BUILD/lib" 2>&1
  ldd "$BIN/amk-run" 2>&1
} >"$LOG/env.log"
cat "$LOG/env.log" | head -5
if [ ! -x "$BIN/amk-run" ] || ! "$BIN/amk-run" --help >/dev/null 2>&1; then
  echo "amk-run from $BIN does not start; see $LOG/env.log"
  cat "$LOG/env.log"
  exit 1
fi
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
row INFO "GPU" "${GPU_NAME:-unknown}"

FIXTURES=${AMK_FIXTURES:-}
for d in ../shared/fixtures/hf shared/fixtures/hf; do
  [ -z "$FIXTURES" ] && [ -d "$d" ] && FIXTURES=$(cd "$d" && pwd)
done

echo "== 1. smoke"
EX=$ROOT/examples/llama-tiny
L1B=$ROOT/examples/configs/llama-3.2-1b
s=$(run_logged smoke-f32 "$BIN/amk-run" "$EX" --device cuda --check -v --prompt-ids 1,17,42,99,3 -n 8)
row "$s" "smoke: examples/llama-tiny fused f32 --check" "$(grep -h 'check PASS\|CHECK FAILED\|error' "$LOG/smoke-f32.log" | head -1)"
SMOKE=$s
s=$(run_logged smoke-bf16 "$BIN/amk-run" "$EX" --dtype bf16 --device cuda --check -n 8)
row "$s" "smoke: examples/llama-tiny fused bf16 --check" "$(grep -h 'check PASS\|CHECK FAILED\|error' "$LOG/smoke-bf16.log" | head -1)"
s=$(run_logged smoke-import "$BIN/amk-run" "$EX" --passes import --device cuda --check -n 8)
row "$s" "smoke: examples/llama-tiny unfused f32 --check" "$(grep -h 'check PASS\|CHECK FAILED\|error' "$LOG/smoke-import.log" | head -1)"
if [ "$SMOKE" != PASS ]; then
  echo "-- the smoke run failed; its log:"
  cat "$LOG/smoke-f32.log"
  echo "-- skipping the matrix and the 1B runs to save device time"
  cat "$SUMMARY"
  exit 1
fi

VARIANTS=("untiled|-import|-sm-assign|-color"
          "tiled|-import|-tile|-sm-assign|-color"
          "fused|-import|-tile|-fuse|-sm-assign|-color"
          "round-robin|-import|-tile|-fuse|-sm-assign|--sm-assignment=round_robin|-color"
          "load-balanced|-import|-tile|-fuse|-sm-assign|--sm-assignment=load_balance|-color"
          "split-kv|-import|-tile|--kv-partitions=2|-fuse|-sm-assign|-color")
FIX_LIST=("$EX")
if [ -n "$FIXTURES" ]; then
  for f in "$FIXTURES"/*/; do [ -f "$f/golden.json" ] && FIX_LIST+=("${f%/}"); done
else
  row SKIP "fixtures" "no ../shared/fixtures/hf here (set AMK_FIXTURES); in-tree example only"
fi
# One fixture through each pipeline variant (name|passes...) in f32 and
# bf16: golden tokens on the GPU (bf16: the first FIRST of them), and
# --check against the reference VM over the golden prompt and length.
check_fixture() {
  local fx=$1 first=$2
  shift 2
  local name prompt ngen v vname dt tag prog s
  name=$(basename "$fx")
  prompt=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['prompt'])))" "$fx/golden.json")
  ngen=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['generated']))" "$fx/golden.json")
  for v in "$@"; do
    local parts passes
    IFS='|' read -r -a parts <<<"$v"
    vname=${parts[0]}
    passes=("${parts[@]:1}")
    for dt in f32 bf16; do
      tag="$name-$vname-$dt"
      prog=$LOG/$tag.amkir
      if ! timeout 120 "$BIN/amk-opt" "$fx" "${passes[@]}" --dtype=$dt -o "$prog" >"$LOG/$tag.compile.log" 2>&1; then
        row FAIL "$tag: amk-opt" "$(tail -1 "$LOG/$tag.compile.log")"
        continue
      fi
      if [ $dt = f32 ]; then
        s=$(run_logged "$tag.golden" python3 utils/check_golden.py "$BIN/amk-run" "$prog" \
          --golden "$fx/golden.json" --device cuda)
      else
        s=$(run_logged "$tag.golden" python3 utils/check_golden.py "$BIN/amk-run" "$prog" \
          --golden "$fx/golden.json" --device cuda --first-tokens "$first")
      fi
      row "$s" "$tag: golden tokens on the GPU" "$(grep -h '^PASS\|^FAIL' "$LOG/$tag.golden.log" | tr '\n' ' ' | cut -c1-150)"
      s=$(run_logged "$tag.check" "$BIN/amk-run" "$prog" --device cuda --check \
        --prompt-ids "$prompt" -n "$ngen")
      row "$s" "$tag: --check vs the reference VM" "$(grep -h 'check PASS\|CHECK FAILED\|TIMEOUT\|error' "$LOG/$tag.check.log" | head -1 | cut -c1-150)"
    done
  done
}
FAMILIES=${AMK_FAMILY_FIXTURES:-}
for d in ../shared/fixtures/families shared/fixtures/families; do
  [ -z "$FAMILIES" ] && [ -d "$d" ] && FAMILIES=$(cd "$d" && pwd)
done
FAM_VARIANTS=("fused|-import|-tile|-fuse|-sm-assign|-color"
              "split-kv|-import|-tile|--kv-partitions=2|-fuse|-sm-assign|-color")

if want 2; then
echo "== 2. compute-sanitizer"
if command -v compute-sanitizer >/dev/null 2>&1; then
  s=$(run_logged memcheck compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$BIN/amk-run" "$EX" --device cuda -n 2)
  row "$s" "compute-sanitizer memcheck (llama-tiny fused, 3 steps)" "$(grep -h 'ERROR SUMMARY' "$LOG/memcheck.log" | head -1)"
else
  row SKIP "compute-sanitizer memcheck" "not installed"
fi
fi

if want 3; then
echo "== 3. fixtures"
for fx in "${FIX_LIST[@]}"; do
  check_fixture "$fx" 4 "${VARIANTS[@]}"
done
fi

if want 3b; then
echo "== 3b. families (Mistral, Qwen2, Qwen3, Phi-3, Gemma) x {fused, split-KV} x {f32, bf16}"
if [ -z "$FAMILIES" ]; then
  row SKIP "families" "no ../shared/fixtures/families here (set AMK_FAMILY_FIXTURES)"
else
  for fx in "$FAMILIES"/*/; do
    fx=${fx%/}
    [ -f "$fx/golden.json" ] || continue
    # mistral-tiny's second token is decided by 2e-4 (below bf16's
    # resolution): its bf16 program is compared on the first token only.
    first=4
    [ "$(basename "$fx")" = mistral-tiny ] && first=1
    check_fixture "$fx" "$first" "${FAM_VARIANTS[@]}"
  done
fi
fi

if want 3c; then
echo "== 3c. weight-only int8 and int4 under --check"
for q in int8 int4; do
  for dt in f32 bf16; do
    s=$(run_logged "quant-tiny-$q-$dt" "$BIN/amk-run" "$EX" --dtype "$dt" --quant "$q" --device cuda \
      --check --prompt-ids 1,17,42,99,3 -n 12)
    row "$s" "llama-tiny $q $dt: --check" "$(grep -h 'check PASS\|CHECK FAILED\|error' "$LOG/quant-tiny-$q-$dt.log" | head -1 | cut -c1-150)"
  done
  if [ -n "$FIXTURES" ]; then
    for fx in "$FIXTURES"/*/; do
      fx=${fx%/}
      n=$(basename "$fx")
      s=$(run_logged "quant-$n-$q" "$BIN/amk-run" "$fx" --dtype bf16 --quant "$q" --device cuda --check -n 8)
      row "$s" "$n $q bf16: --check" "$(grep -h 'check PASS\|CHECK FAILED\|error' "$LOG/quant-$n-$q.log" | head -1 | cut -c1-150)"
    done
  fi
  s=$(STEP_TIMEOUT=400 run_logged "quant-1b-$q" "$BIN/amk-run" "$L1B" --random-weights 1 --dtype bf16 \
    --quant "$q" --max-seq 256 --device cuda --check --check-steps 8 --prompt-ids 1,2,3 -n 8 --ignore-eos)
  row "$s" "1B $q bf16: --check, 8 steps" "$(grep -h 'check PASS\|CHECK FAILED\|error' "$LOG/quant-1b-$q.log" | head -1 | cut -c1-150)"
  # SmolLM2's rows (K 576 and 1536) leave pieces after a lane's batches:
  # the row dot's last batch (amk_gemv_tail) and the piece-at-a-time loop.
  s=$(run_logged "quant-smollm2-$q" "$BIN/amk-run" "$(dirname "$L1B")/smollm2-135m" --random-weights 1 \
    --dtype bf16 --quant "$q" --max-seq 256 --device cuda --check --prompt-ids 1,2,3 -n 8 --ignore-eos)
  row "$s" "SmolLM2-135M $q bf16: --check" "$(grep -h 'check PASS\|CHECK FAILED\|error' "$LOG/quant-smollm2-$q.log" | head -1 | cut -c1-150)"
done
fi

if want 4; then
echo "== 4. Llama-3.2-1B shape, bf16, random weights, 256 tokens"
s=$(STEP_TIMEOUT=400 run_logged l1b-check "$BIN/amk-run" "$L1B" --random-weights 1 --dtype bf16 \
  --max-seq 2048 --device cuda --check --check-steps "$CHECK_1B" -v -n 255 --prompt-ids 1 --ignore-eos)
row "$s" "1B bf16: 256 tokens, --check (first $CHECK_1B steps vs the VM)" "$(grep -h 'check PASS\|CHECK FAILED\|TIMEOUT\|kernel time\|error' "$LOG/l1b-check.log" | tr '\n' ' ' | cut -c1-170)"
fi

if want 4b; then
echo "== 4b. watchdog: a launch that cannot finish ends as TIMEOUT (exit 3)"
AMK_CUDA_TEST_STALL=1 AMK_CUDA_TIMEOUT_MS=2000 timeout 120 "$BIN/amk-run" "$EX" --device cuda -n 2 \
  >"$LOG/watchdog.log" 2>&1
rc=$?
if [ $rc -eq 3 ] && grep -q "TIMEOUT" "$LOG/watchdog.log"; then s=PASS; else s=FAIL; fi
row "$s" "watchdog: stalled launch reports TIMEOUT, exit 3 (got $rc)" "$(grep -h TIMEOUT "$LOG/watchdog.log" | head -1 | cut -c1-150)"
fi

if want 5; then
echo "== 5. bench"
s=$(STEP_TIMEOUT=400 run_logged l1b-bench "$BIN/amk-run" "$L1B" --random-weights 1 --dtype bf16 \
  --max-seq 2048 --bench --bench-pos 0,1024 --bench-steps 128 --bench-warmup 10 --json \
  --trace "$LOG/l1b-bench.trace.json")
row "$s" "1B bf16 --bench at positions 0 and 1024" "see below"
BENCH_JSON=$(grep -h '^{' "$LOG/l1b-bench.log" | tail -1)
fi

if want 6; then
echo "== 6. GEMM_TILE on the tensor cores (utils/gpu-gemm.sh)"
OUT=$LOG AMK_BUILD=$BUILD timeout --kill-after=10 900 utils/gpu-gemm.sh >"$LOG/gemm.log" 2>&1
grep -h '^| ' "$LOG/gemm.log" >>"$SUMMARY"
GEMM_FAILS=$(sed -n 's/^gemm failures: //p' "$LOG/gemm.log")
if [ -z "$GEMM_FAILS" ]; then
  row FAIL "GEMM_TILE: utils/gpu-gemm.sh did not finish" "$(tail -1 "$LOG/gemm.log" | cut -c1-150)"
else
  FAILS=$((FAILS + GEMM_FAILS))
fi
fi

if want 7; then
echo "== 7. prefill programs on the GPU under --check"
# The default pipeline (fused decode program: each chunk's KV rows are
# copied device to device into its caches) everywhere; without fuse (the
# engines share the caches by name) on llama-tiny too.
UNFUSED=import,tile,sm-assign,color
IDS20=1,17,42,99,3,5,8,13,21,34,55,89,144,233,7,11,19,23,29,31
for dt in f32 bf16; do
  for pipe in default unfused; do
    [ $pipe = unfused ] && set -- --passes "$UNFUSED" || set --
    s=$(run_logged "prefill-tiny-$dt-$pipe" "$BIN/amk-run" "$EX" --device cuda --check -v --dtype "$dt" \
      "$@" -b 8 --prompt-ids "$IDS20" -n 8 -c 64)
    # A PASS needs the prompt to have gone in by prefill programs.
    grep -q 'fed in chunks' "$LOG/prefill-tiny-$dt-$pipe.log" || [ "$s" != PASS ] || s=FAIL
    row "$s" "prefill: llama-tiny $dt $pipe -b 8, 20-token prompt, --check" "$(grep -h 'check PASS\|CHECK FAILED\|TIMEOUT\|error' "$LOG/prefill-tiny-$dt-$pipe.log" | head -1 | cut -c1-150)"
  done
done
# Weight-only int8/int4 prefill programs (amk_gemm_mma_quant on the tensor
# cores for bf16, amk_gemm_quant on the CUDA cores for f32).
for q in int8 int4; do
  for dt in f32 bf16; do
    s=$(run_logged "prefill-tiny-$q-$dt" "$BIN/amk-run" "$EX" --device cuda --check -v --dtype "$dt" \
      --quant "$q" -b 8 --prompt-ids "$IDS20" -n 8 -c 64)
    grep -q 'fed in chunks' "$LOG/prefill-tiny-$q-$dt.log" || [ "$s" != PASS ] || s=FAIL
    row "$s" "prefill: llama-tiny --quant $q $dt -b 8, 20-token prompt, --check" "$(grep -h 'check PASS\|CHECK FAILED\|TIMEOUT\|token by token\|error' "$LOG/prefill-tiny-$q-$dt.log" | head -1 | cut -c1-150)"
  done
done
PREFILL_FIX=("${FIX_LIST[@]:1}")
if [ -n "$FAMILIES" ]; then
  for f in "$FAMILIES"/*/; do [ -f "$f/golden.json" ] && PREFILL_FIX+=("${f%/}"); done
fi
for fx in "${PREFILL_FIX[@]}"; do
  name=$(basename "$fx")
  prompt=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['prompt'])))" "$fx/golden.json")
  for dt in f32 bf16; do
    s=$(run_logged "prefill-$name-$dt" "$BIN/amk-run" "$fx" --device cuda --check -v --dtype "$dt" \
      -b 4 --prompt-ids "$prompt" -n 8)
    grep -q 'fed in chunks' "$LOG/prefill-$name-$dt.log" || [ "$s" != PASS ] || s=FAIL
    row "$s" "prefill: $name $dt -b 4, --check" "$(grep -h 'check PASS\|CHECK FAILED\|TIMEOUT\|error' "$LOG/prefill-$name-$dt.log" | head -1 | cut -c1-150)"
  done
done
IDS600=$(python3 -c "print(','.join(str((i * 7919) % 128000 + 1) for i in range(600)))")
s=$(STEP_TIMEOUT=900 run_logged prefill-l1b "$BIN/amk-run" "$L1B" --random-weights 1 --dtype bf16 \
  --max-seq 2048 --device cuda --check --check-steps 4 -v -b 512 \
  --prompt-ids "$IDS600" -n 2 --ignore-eos)
grep -q 'fed in chunks' "$LOG/prefill-l1b.log" || [ "$s" != PASS ] || s=FAIL
row "$s" "prefill: 1B bf16 random weights, 600 tokens, -b 512, --check" "$(grep -h 'check PASS\|CHECK FAILED\|TIMEOUT\|token by token\|error' "$LOG/prefill-l1b.log" | head -1 | cut -c1-150)"
fi

T1=$(date +%s)
echo
echo "================ AMK CUDA backend: GPU check summary ($((T1 - T0)) s) ================"
printf '| %-7s | %-58s | %s\n' status check detail
printf '|---------|------------------------------------------------------------|--------\n'
cat "$SUMMARY"
if ! want 5; then
  :
elif [ -n "${BENCH_JSON:-}" ]; then
  python3 - "$BENCH_JSON" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
print()
print(f"bench: {d['gpu']}")
print(f"weights {d['weight_bytes']/1e9:.3f} GB; measured read bandwidth {d['read_bw_gbs']:.0f} GB/s")
print("|  pos | median ms | p10 ms | p90 ms |  GB/s | % of read bw | tokens/s | check | bar (30%) |")
for r in d["results"]:
    print(f"| {r['pos']:4d} | {r['median_ms']:9.4f} | {r['p10_ms']:6.4f} | {r['p90_ms']:6.4f} |"
          f" {r['gbs']:5.0f} | {r['pct_read_bw']:11.1f}% | {r['tokens_per_s']:8.1f} | {r['check']} |"
          f" {'MET' if r['pct_read_bw'] >= 30 else 'not met'} |")
PY
  echo
  grep -h '^amk-run: trace\|^trace:\|^| ' "$LOG/l1b-bench.log"
else
  echo "bench: no result; tail of its log:"
  tail -20 "$LOG/l1b-bench.log"
fi
echo "failures: $FAILS (logs in $LOG)"
[ "$FAILS" -eq 0 ]
