#!/usr/bin/env bash
# The decode benchmark of issue 11 in one call, on the GPU machine: for the
# Llama-3.2-1B, SmolLM2-135M and Llama-3.1-8B shapes (bf16, random weights),
# our megakernel's per-token kernel time (amk-run --bench, median of 128
# steps after 10 warm-up steps, checked against the reference VM in the same
# run) beside the anchors measured by ../shared/bench/anchors.py in the same
# call on the same card: the read-bandwidth floor, HuggingFace's decode step
# as a CUDA graph, and cuBLAS's linears alone. Prints one table, then each
# shape's --trace report (where the time went).
#
#   utils/bench-gpu.sh [SHAPE ...]      (default: llama-3.2-1b smollm2-135m llama-3.1-8b
#                                        qwen2.5-0.5b qwen3-0.6b)
#
# Environment: AMK_BUILD (build folder, default build), AMK_ANCHORS (the path
# of anchors.py; default ../shared/bench/anchors.py, else shared/bench/...;
# empty or missing: no anchors), OUT (logs; default /tmp/amk-bench-gpu),
# AMK_BENCH_QUANT (weight-only formats to time too, "int8 int4" or either:
# each shape again with --quant, a table of them beside the bf16 step and
# cuBLAS's bf16 linears, and each one's trace report after the bf16 one's,
# docs/Quantization.md; default none),
# AMK_BENCH_TP (tensor-parallel group sizes to time too, "2" or "2 4":
# each shape again with --tp N where the machine has N GPUs, and a table of
# the --tp N step against the one-GPU step of the same call, with rank 0's
# collectives from its trace, docs/TensorParallel.md; default none).
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${AMK_BUILD:-build}/bin
LOG=${OUT:-/tmp/amk-bench-gpu}
mkdir -p "$LOG"
export AMK_CACHE_DIR=${AMK_CACHE_DIR:-$LOG/cubin-cache}
SHAPES=("$@")
QUANTS=${AMK_BENCH_QUANT-}
for q in $QUANTS; do
  case $q in int8 | int4) ;; *) echo "bench-gpu: AMK_BENCH_QUANT takes int8 and int4, not '$q'" >&2; exit 2 ;; esac
done
TPS=${AMK_BENCH_TP-}
for n in $TPS; do
  case $n in
    [2-9] | [1-9][0-9]) ;;
    *) echo "bench-gpu: AMK_BENCH_TP takes group sizes from 2 to 99, not '$n'" >&2; exit 2 ;;
  esac
done
GPUS=0
[ -n "$TPS" ] && GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ ${#SHAPES[@]} -eq 0 ] && SHAPES=(llama-3.2-1b smollm2-135m llama-3.1-8b qwen2.5-0.5b qwen3-0.6b)
ANCHORS=${AMK_ANCHORS-}
if [ -z "${AMK_ANCHORS+set}" ]; then
  for a in ../shared/bench/anchors.py shared/bench/anchors.py; do
    [ -f "$a" ] && ANCHORS=$a && break
  done
fi

# One decode bench of a shape at positions $2 into log $3, with more
# amk-run arguments after those.
bench() {
  local shape=$1 pos=$2 log=$3
  shift 3
  timeout 150 "$BIN/amk-run" "examples/configs/$shape" --random-weights 1 --dtype bf16 \
    --max-seq 2048 --bench --bench-pos "$pos" --bench-steps 128 --bench-warmup 10 --json \
    "$@" >"$log" 2>&1
  echo "rc=$?"
}

for shape in "${SHAPES[@]}"; do
  case $shape in
    llama-3.2-1b) pos=0,1024 ;;
    *) pos=0 ;;
  esac
  echo "== ours: $shape (positions $pos)"
  bench "$shape" "$pos" "$LOG/$shape.bench.log" --trace "$LOG/$shape.trace.json"
  for q in $QUANTS; do
    echo "== ours: $shape --quant $q (positions $pos)"
    bench "$shape" "$pos" "$LOG/$shape.$q.bench.log" --quant "$q" --trace "$LOG/$shape.$q.trace.json"
  done
  for n in $TPS; do
    if [ "$GPUS" -lt "$n" ]; then
      echo "== ours: $shape --tp $n: skipped ($GPUS GPUs)"
      continue
    fi
    echo "== ours: $shape --tp $n (positions $pos)"
    bench "$shape" "$pos" "$LOG/$shape.tp$n.bench.log" --tp "$n" --trace "$LOG/$shape.tp$n.trace.json"
  done
  if [ "$shape" = llama-3.2-1b ]; then
    # Time to first token of a 512-token prompt: one prefill program of 512
    # rows, its KV rows copied into the fused decode program's caches, plus
    # one decode step, beside the anchors' hf_prefill_512 (HF's eager
    # forward over 512 tokens); the trace of the prefill launch goes to the
    # log (where its time went).
    echo "== ours: $shape prefill of 512 tokens (TTFT)"
    timeout 300 "$BIN/amk-run" "examples/configs/$shape" --random-weights 1 --dtype bf16 \
      --max-seq 2048 -b 512 --bench --bench-pos 0 \
      --bench-steps 16 --bench-warmup 2 --bench-prompt 512 --json -v \
      --trace "$LOG/$shape.ttft.json" >"$LOG/$shape.prefill.log" 2>&1
    echo "rc=$?"
  fi
done

if [ -n "$ANCHORS" ] && [ -f "$ANCHORS" ]; then
  echo "== anchors: $ANCHORS"
  # anchors.py knows the Llama shapes only (the Qwen ones are ours alone).
  ANCHOR_SHAPES=()
  for shape in "${SHAPES[@]}"; do
    case $shape in llama-3.2-1b | smollm2-135m | llama-3.1-8b) ANCHOR_SHAPES+=("$shape") ;; esac
  done
  timeout 380 python3 "$ANCHORS" "$LOG/anchors.json" "${ANCHOR_SHAPES[@]}" >"$LOG/anchors.log" 2>&1
  echo "rc=$?"
else
  echo "== anchors: anchors.py not found (set AMK_ANCHORS); ours alone"
fi

AMK_BENCH_QUANT="$QUANTS" AMK_BENCH_TP="$TPS" python3 - "$LOG" "${SHAPES[@]}" <<'PY'
import json, os, re, sys
log, shapes = sys.argv[1], sys.argv[2:]
quants = os.environ.get("AMK_BENCH_QUANT", "").split()
tps = os.environ.get("AMK_BENCH_TP", "").split()
anchors = {}
path = os.path.join(log, "anchors.json")
if os.path.exists(path):
    for r in json.load(open(path)):
        if "model" in r:
            anchors[r["model"]] = r
        elif "gpu" in r:
            anchors["_info"] = r
def ours(shape, quant=None):
    p = os.path.join(log, shape + (f".{quant}" if quant else "") + ".bench.log")
    text = open(p).read() if os.path.exists(p) else ""
    lines = [l for l in text.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None
info = anchors.get("_info", {})
print()
print(f"card: {info.get('gpu', '?')}; read bandwidth (torch sum) {info.get('read_GBps', '?')} GB/s")
# Two read bandwidths: amk-run's own probe (the floor and "% of read bw",
# as every earlier table) and anchors.py's torch sum, which reads slower
# (an H200: about 4.44 against 4.17 TB/s), beside it.
torch_bw = info.get("read_GBps")
print("| shape | floor ms | ours ms (pos) | % of read bw | % of torch's read bw | HF CUDA graph ms | cuBLAS linears ms | ours vs graph | ours vs cuBLAS | check |")
print("|---|---|---|---|---|---|---|---|---|---|")
for s in shapes:
    o = ours(s)
    a = anchors.get(s, {})
    graph = a.get("cudagraph_pos0", {}).get("median_ms")
    lin = a.get("cublas_linears_graph", {}).get("median_ms")
    if not o:
        print(f"| {s} | | no result (see {s}.bench.log) | | | | | | | |")
        continue
    floor = o["weight_bytes"] / (o["read_bw_gbs"] * 1e9) * 1e3
    for r in o["results"]:
        t = r["median_ms"]
        g = f"{graph:.3f}" if graph else "-"
        l = f"{lin:.3f}" if lin else "-"
        vg = f"{graph / t:.2f}x" if graph else "-"
        vl = f"{lin / t:.2f}x" if lin else "-"
        tb = f"{o['weight_bytes'] / (t * 1e-3) / (torch_bw * 1e9) * 100:.1f}%" if torch_bw else "-"
        print(f"| {s} | {floor:.3f} | {t:.4f} ({r['pos']}) | {r['pct_read_bw']:.1f}% | {tb} | {g} | {l} | {vg} | {vl} | {r['check']} |")
print()
# Time to first token, 512-token prompt (1B shape): ours (prefill + one
# decode step) against HF's eager 512-token forward; the target is 1.2x.
p = os.path.join(log, "llama-3.2-1b.prefill.log")
if "llama-3.2-1b" in shapes and os.path.exists(p):
    lines = [l for l in open(p).read().splitlines() if l.startswith("{")]
    pf = json.loads(lines[-1]).get("prefill") if lines else None
    hf = anchors.get("llama-3.2-1b", {}).get("hf_prefill_512", {}).get("median_ms")
    print("| shape | prompt | ours prefill ms | prefill tokens/s | ours TTFT ms | HF eager prefill ms | TTFT / HF (target <= 1.2) |")
    print("|---|---|---|---|---|---|---|")
    if pf:
        ratio = f"{pf['ttft_ms'] / hf:.2f}" if hf else "-"
        print(f"| llama-3.2-1b | {pf['prompt_tokens']} | {pf['prefill_ms']:.3f} | {pf['prefill_tokens_per_s']:.0f} | "
              f"{pf['ttft_ms']:.3f} | {hf if hf else '-'} | {ratio} |")
    else:
        print("| llama-3.2-1b | 512 | no prefill result (see llama-3.2-1b.prefill.log) | | | | |")
    print()
# Weight-only quantized steps beside the bf16 one (AMK_BENCH_QUANT): the %
# of read bandwidth counts the bytes a step streams (weights and scales).
# Each shape's one-GPU bf16 rows with the runs of other settings beside
# them (their logs' tags: int8, tp2, ...): cell(t, run's row) where the run
# has the position, else "no result" and `missing` more empty cells.
def beside(s, tags, cell, missing):
    base = ours(s)
    runs = {tag: ours(s, tag) for tag in tags}
    for r in base["results"] if base else []:
        cells, checks = [], {r["check"]}
        for tag in tags:
            vr = next((x for x in (runs[tag] or {}).get("results", []) if x["pos"] == r["pos"]), None)
            if vr:
                checks.add(vr["check"])
                cells.append(cell(r["median_ms"], vr))
            else:
                cells.append(f"no result (see {s}.{tag}.bench.log)" + " | -" * missing)
        yield r, cells, ",".join(sorted(checks))
if quants:
    head = "| shape | pos | bf16 ms | " + " | ".join(f"{q} ms (% read bw) | {q} vs bf16 | {q} vs cuBLAS" for q in quants)
    head += " | cuBLAS bf16 linears ms | check |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for s in shapes:
        lin = anchors.get(s, {}).get("cublas_linears_graph", {}).get("median_ms")
        def quant_cell(t, qr):
            tq = qr["median_ms"]
            vl = f"{lin / tq:.2f}x" if lin else "-"
            return f"{tq:.4f} ({qr['pct_read_bw']:.1f}%) | {t / tq:.2f}x | {vl}"
        l = f"{lin:.3f}" if lin else "-"
        for r, cells, checks in beside(s, quants, quant_cell, 2):
            print(f"| {s} | {r['pos']} | {r['median_ms']:.4f} | " + " | ".join(cells) + f" | {l} | {checks} |")
    print()
# Tensor-parallel steps beside the one-GPU step (AMK_BENCH_TP): a rank's %
# of its card's read bandwidth counts its own weight bytes; issue 18's bar
# is the 8B at --tp 2 <= 0.6x. Then rank 0's collectives from its trace.
if tps:
    print("| shape | pos | --tp 1 ms | " + " | ".join(f"--tp {n} ms (% read bw) | --tp {n} / --tp 1" for n in tps) + " | check |")
    print("|" + "---|" * (4 + 2 * len(tps)))
    tp_cell = lambda t, tr: f"{tr['median_ms']:.4f} ({tr['pct_read_bw']:.1f}%) | {tr['median_ms'] / t:.2f}"
    for s in shapes:
        for r, cells, checks in beside(s, ["tp" + n for n in tps], tp_cell, 1):
            print(f"| {s} | {r['pos']} | {r['median_ms']:.4f} | " + " | ".join(cells) + f" | {checks} |")
    print()
    for s in shapes:
        for n in tps:
            p = os.path.join(log, f"{s}.tp{n}.bench.log")
            text = open(p).read() if os.path.exists(p) else ""
            # The first position's report: up to the next launch's.
            first = re.split(r"^amk-run: trace of the launch at position.*$", text, flags=re.M)
            first = first[1] if len(first) > 1 else text
            rows = [l for l in first.splitlines() if re.match(r"^\| \S*(allreduce|gather)", l)]
            if rows:
                print(f"-- {s} --tp {n}: rank 0's collectives (trace of one launch, first position)")
                print("\n".join(rows))
                print()
print("floor: weight bytes over the read bandwidth amk-run measured in the same run;")
print("ours vs X: X's time over ours (above 1: we are faster).")
for s in shapes:
    for q in [None] + quants:
        p = os.path.join(log, s + (f".{q}" if q else "") + ".bench.log")
        text = open(p).read() if os.path.exists(p) else ""
        rep = [l for l in text.splitlines() if l.startswith("trace:") or re.match(r"^\| [a-z]", l)]
        if rep:
            print(f"\n-- {s}{f' --quant {q}' if q else ''}: trace of one launch (first position)")
            n = next((i for i, l in enumerate(rep[1:], 1) if l.startswith("trace:") and "from the first arrival" in l), len(rep))
            print("\n".join(rep[:n]))
PY
