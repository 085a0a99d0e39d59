#!/usr/bin/env bash
# Encode speed on one core: amk-tokenize beside HuggingFace's `tokenizers`
# (the Python package when it can be imported, else the npm package of the
# same Rust library when node can load it), on the same deterministic text.
#
#   utils/bench-tokenizer.sh [BUILD_DIR]      (default: build)
#
# Text: utils/gen_tokenizer_bench.py, $AMK_BENCH_MB megabytes (default 1) of
# each of prose, code, non-Latin scripts, digits and emoji, and all of them
# mixed. Tokenizers: the two fixtures in test/tokenizer/Inputs, and any
# tokenizer.json files or folders listed in $AMK_BENCH_TOKENIZERS
# (space-separated; e.g. a real Llama 3 folder on the GPU machine).
# Both sides time CPU time of one thread, best of $AMK_BENCH_REPEAT rounds
# (default 5), without special tokens. Where tokenizers runs, every string's
# ids and decoded text are compared too ("ids" column: strings that differ).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
tool="$build/bin/amk-tokenize"
[ -x "$tool" ] || { echo "bench-tokenizer: no $tool; build first (utils/build.sh)" >&2; exit 1; }
mb="${AMK_BENCH_MB:-1}"
repeat="${AMK_BENCH_REPEAT:-5}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

python3 "$root/utils/gen_tokenizer_bench.py" "$tmp/text" --megabytes "$mb"
tokenizers=("$root/test/tokenizer/Inputs/bytelevel-llama3/tokenizer.json"
            "$root/test/tokenizer/Inputs/spm-llama2/tokenizer.json")
for extra in ${AMK_BENCH_TOKENIZERS:-}; do
  [ -d "$extra" ] && extra="$extra/tokenizer.json"
  tokenizers+=("$extra")
done
# One thread for tokenizers too.
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false UV_THREADPOOL_SIZE=1
hf=""
if python3 -c "import tokenizers" 2>/dev/null; then
  hf=python
elif command -v node >/dev/null && node -e "require('tokenizers')" 2>/dev/null; then
  hf=node
fi

mbps() { sed -n 's/.* \([0-9.]*\) MB\/s$/\1/p'; }

printf '%-28s %-8s %8s %12s %12s %7s %6s\n' tokenizer text MB "amk MB/s" "hf MB/s" ratio ids
for tokenizer in "${tokenizers[@]}"; do
  name="$(basename "$(dirname "$tokenizer")")"
  for kind in prose code scripts digits emoji mixed; do
    input="$tmp/text/$kind.json"
    size=$(python3 -c "import json,sys; print('%.1f' % (sum(len(t.encode()) for t in json.load(open(sys.argv[1])))/1e6))" "$input")
    ours=$("$tool" --tokenizer "$tokenizer" --bench "$input" --repeat "$repeat" | mbps)
    theirs="-" ratio="-" differ="-"
    if [ -n "$hf" ]; then
      "$tool" --tokenizer "$tokenizer" --batch "$input" -o "$tmp/ours.json"
      if [ $hf = python ]; then
        out=$(python3 "$root/utils/bench_hf_tokenizers.py" "$tokenizer" "$input" \
              --repeat "$repeat" --compare "$tmp/ours.json")
      else
        out=$(node "$root/utils/bench_hf_tokenizers.js" "$tokenizer" "$input" \
              "$repeat" "$tmp/ours.json")
      fi
      theirs=$(printf '%s\n' "$out" | grep '^tokenizers:' | mbps)
      differ=$(printf '%s\n' "$out" | sed -n 's/^compare: [0-9]* strings, \([0-9]*\) differ$/\1/p')
      ratio=$(python3 -c "print('%.2f' % ($ours / $theirs))")
    fi
    printf '%-28s %-8s %8s %12s %12s %7s %6s\n' "$name" "$kind" "$size" "$ours" "$theirs" "$ratio" "$differ"
  done
done
case "$hf" in
  python) echo "(hf: the Python tokenizers package, $(python3 -c 'import tokenizers; print(tokenizers.__version__)'))" ;;
  node) echo "(hf: the npm tokenizers package through node, $(node -p "require('tokenizers/package.json').version"))" ;;
  *) echo "(tokenizers can be loaded neither from Python nor from node here: amk only)" ;;
esac
