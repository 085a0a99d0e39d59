#!/usr/bin/env bash
# GEMM_TILE on the tensor cores (amk_gemm_mma, docs/Backend.md), on the GPU
# machine: every case of test/cuda/Inputs/gemm_case.py (aligned, ragged
# M/N/K with a bias, f16, an odd column split, a tall task) runs on the GPU
# under amk-run --check (ragged and odd-split also under compute-sanitizer)
# and its output is compared with the case's independent reference at the
# output dtype's precision (gemm_case.py check), with the tensor-core path
# in 128 x 128 and 128 x 256 sub-tiles (AMK_CUDA_GEMM_TILE_N) and with
# AMK_CUDA_GEMM_MMA=0 where the old path takes the shape; then the
# microbenchmark: one 512 x 8192 x 2048 bf16 GEMM under amk-run --bench,
# as 256 tasks of 128 x 128 with 128 x 128 sub-tiles and as 128 tasks of
# 128 x 256 with 128 x 256 sub-tiles, printed as TFLOP/s. The weight-only
# int8/int4 GEMM tiles (amk_gemm_mma_quant, amk_gemm_quant;
# docs/Quantization.md) likewise: each `gemm_case.py qnames` case under
# --check and against its reference (default path, and AMK_CUDA_GEMM_MMA=0
# up to 64 rows), three under compute-sanitizer, and the same benchmark
# GEMM with int8 and int4 weights.
#
#   utils/gpu-gemm.sh          (utils/gpu-check.sh runs it as its step 6)
#
# Environment: AMK_BUILD (default build), OUT (logs; default /tmp/amk-gpu-gemm).
# Prints one `| status | what | detail` row per check, then `gemm failures: N`;
# exits non-zero when any check failed.
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${AMK_BUILD:-build}/bin
LOG=${OUT:-/tmp/amk-gpu-gemm}/gemm
mkdir -p "$LOG"
export AMK_CACHE_DIR=${AMK_CACHE_DIR:-$LOG/cubin-cache}
CASE=test/cuda/Inputs/gemm_case.py
FAILS=0
row() { # status, what, detail
  printf '| %-7s | %-58s | %s\n' "$1" "$2" "$3"
  [ "$1" = PASS ] || [ "$1" = INFO ] || FAILS=$((FAILS + 1))
}
prepare() { # case -> $LOG/case/{case.amkir, model.safetensors}
  local d=$LOG/$1
  mkdir -p "$d"
  python3 $CASE program "$1" "$d/raw.amkir" && python3 $CASE weights "$1" "$d" &&
    "$BIN/amk-opt" "$d/raw.amkir" -sm-assign -color -validate -o "$d/$1.amkir" 2>"$d/opt.log"
}
for c in $(python3 $CASE names); do
  if ! prepare "$c"; then
    row FAIL "gemm $c: amk-opt" "$(tail -1 "$LOG/$c/opt.log")"
    continue
  fi
  for mode in mma128 mma256 cuda-cores; do
    # The CUDA-core path takes at most 64 rows (tiny, f16); tiny's K of 4
    # is no multiple of 8, so it takes that path under both settings.
    [ $mode = cuda-cores ] && [ "$c" != tiny ] && [ "$c" != f16 ] && continue
    mma=1 tile_n=128
    [ $mode = cuda-cores ] && mma=0
    [ $mode = mma256 ] && tile_n=256
    out=$LOG/$c/$mode
    AMK_CUDA_GEMM_MMA=$mma AMK_CUDA_GEMM_TILE_N=$tile_n timeout 120 "$BIN/amk-run" "$LOG/$c/$c.amkir" --device cuda --check \
      -n 0 --prompt-ids 0 --dump-logits "$out.json" >"$out.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
      row FAIL "gemm $c ($mode): amk-run --check" "rc $rc: $(grep -h 'error\|FAIL' "$out.log" | head -1 | cut -c1-120)"
      continue
    fi
    if python3 $CASE check "$c" "$LOG/$c" "$out.json" >"$out.cmp" 2>&1; then s=PASS; else s=FAIL; fi
    row $s "gemm $c ($mode): --check and the reference" "$(tail -1 "$out.cmp" | cut -c1-120)"
  done
done

# Weight-only int8/int4 GEMM tiles (amk_gemm_mma_quant on the tensor cores,
# amk_gemm_quant on the CUDA cores; docs/Quantization.md): each quantized
# case under --check (the reference VM dequantizes q * scale in fp32) and
# against the case's exact reference, on its default path and, where it
# has at most 64 rows, with AMK_CUDA_GEMM_MMA=0 (the CUDA-core path).
for c in $(python3 $CASE qnames); do
  if ! prepare "$c"; then
    row FAIL "gemm $c: amk-opt" "$(tail -1 "$LOG/$c/opt.log")"
    continue
  fi
  rows=$(python3 -c "import sys; sys.path.insert(0, 'test/cuda/Inputs'); import gemm_case as g; print(g.qcase(sys.argv[1])[0])" "$c")
  for mode in default cuda-cores; do
    [ $mode = cuda-cores ] && [ "$rows" -gt 64 ] && continue
    mma=1
    [ $mode = cuda-cores ] && mma=0
    out=$LOG/$c/$mode
    AMK_CUDA_GEMM_MMA=$mma timeout 120 "$BIN/amk-run" "$LOG/$c/$c.amkir" --device cuda --check \
      -n 0 --prompt-ids 0 --dump-logits "$out.json" >"$out.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
      row FAIL "gemm $c ($mode): amk-run --check" "rc $rc: $(grep -h 'error\|FAIL' "$out.log" | head -1 | cut -c1-120)"
      continue
    fi
    if python3 $CASE check "$c" "$LOG/$c" "$out.json" >"$out.cmp" 2>&1; then s=PASS; else s=FAIL; fi
    row $s "gemm $c ($mode): --check and the reference" "$(tail -1 "$out.cmp" | cut -c1-120)"
  done
done

# Out-of-bounds or misaligned accesses of the template (ragged edges, an odd
# column split), when compute-sanitizer is there.
if command -v compute-sanitizer >/dev/null 2>&1; then
  for c in ragged odd-split q4-ragged q8-g48 q4-one-group; do
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/amk-run" \
      "$LOG/$c/$c.amkir" --device cuda -n 0 --prompt-ids 0 >"$LOG/$c/memcheck.log" 2>&1
    if [ $? -eq 0 ]; then s=PASS; else s=FAIL; fi
    row $s "gemm $c: compute-sanitizer memcheck" "$(grep -h 'ERROR SUMMARY' "$LOG/$c/memcheck.log" | head -1)"
  done
fi

# The microbenchmark: per-launch kernel time of one program that is this
# GEMM alone (no other task), as a median over --bench-steps launches.
for tile_n in 128 256; do
  b=bench
  [ $tile_n = 256 ] && b=bench-wide
  if ! prepare $b; then
    row FAIL "gemm $b: amk-opt" "$(tail -1 "$LOG/$b/opt.log")"
    continue
  fi
  blog=$LOG/$b.log
  AMK_CUDA_GEMM_TILE_N=$tile_n timeout 300 "$BIN/amk-run" "$LOG/$b/$b.amkir" --device cuda \
    --bench --bench-steps 50 --bench-warmup 5 --json -n 0 --prompt-ids 0 >"$blog" 2>&1
  rc=$?
  ms=$(python3 -c "
import json, sys
for line in open(sys.argv[1]):
    if line.startswith('{'):
        d = json.loads(line)
print(d['results'][0]['median_ms'])" "$blog" 2>/dev/null)
  if [ $rc -eq 0 ] && [ -n "$ms" ]; then
    tf=$(python3 -c "print('%.1f' % (2 * 512 * 8192 * 2048 / ($ms * 1e-3) / 1e12))")
    row INFO "gemm $b: 512 x 8192 x 2048 bf16, 128 x $tile_n sub-tiles" "median $ms ms, $tf TFLOP/s"
  else
    row FAIL "gemm $b: 512 x 8192 x 2048 bf16, 128 x $tile_n" "rc $rc: $(tail -2 "$blog" | tr '\n' ' ' | cut -c1-120)"
  fi
done
# The quantized microbenchmark: the same GEMM with int8 and int4 weights
# (group 128), 256 tasks of 128 x 128 (TFLOP/s counts the same 2 M N K).
for b in q8-bench q4-bench; do
  if ! prepare $b; then
    row FAIL "gemm $b: amk-opt" "$(tail -1 "$LOG/$b/opt.log")"
    continue
  fi
  blog=$LOG/$b.log
  timeout 300 "$BIN/amk-run" "$LOG/$b/$b.amkir" --device cuda \
    --bench --bench-steps 50 --bench-warmup 5 --json -n 0 --prompt-ids 0 >"$blog" 2>&1
  rc=$?
  ms=$(python3 -c "
import json, sys
for line in open(sys.argv[1]):
    if line.startswith('{'):
        d = json.loads(line)
print(d['results'][0]['median_ms'])" "$blog" 2>/dev/null)
  if [ $rc -eq 0 ] && [ -n "$ms" ]; then
    tf=$(python3 -c "print('%.1f' % (2 * 512 * 8192 * 2048 / ($ms * 1e-3) / 1e12))")
    row INFO "gemm $b: 512 x 8192 x 2048, ${b:0:2} weights, 128 x 128" "median $ms ms, $tf TFLOP/s"
  else
    row FAIL "gemm $b: 512 x 8192 x 2048, ${b:0:2} weights" "rc $rc: $(tail -2 "$blog" | tr '\n' ' ' | cut -c1-120)"
  fi
done
echo "gemm failures: $FAILS"
[ "$FAILS" -eq 0 ]
