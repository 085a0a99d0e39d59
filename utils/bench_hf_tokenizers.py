#!/usr/bin/env python3
"""The Python `tokenizers` side of utils/bench-tokenizer.sh.

Usage: bench_hf_tokenizers.py TOKENIZER_JSON IN.json [--repeat N]
                              [--compare AMK_BATCH_OUT.json]

Encodes each string of IN.json (a JSON array) with tokenizers, without
special tokens, single-threaded, --repeat times; prints the best round's
MB/s of CPU time (as amk-tokenize --bench measures). With --compare, also
checks amk-tokenize --batch's answer for the same strings: the ids, and the
text decoded from them, must be tokenizers' own; prints how many differ.
Exits 2 when tokenizers cannot be imported.
"""
import argparse
import json
import os
import sys
import time

# One core, as amk-tokenize measures: no Rayon thread pool.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tokenizer")
    p.add_argument("input")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--compare")
    args = p.parse_args()
    try:
        from tokenizers import Tokenizer
    except ImportError:
        print("tokenizers: not importable", file=sys.stderr)
        return 2
    tok = Tokenizer.from_file(args.tokenizer)
    texts = json.load(open(args.input, encoding="utf-8"))
    size = sum(len(t.encode()) for t in texts)
    best = None
    for _ in range(args.repeat):
        start = time.thread_time()
        for t in texts:
            tok.encode(t, add_special_tokens=False)
        seconds = time.thread_time() - start
        best = seconds if best is None else min(best, seconds)
    print(f"tokenizers: {size} bytes, best of {args.repeat}: {best:.4f} s of CPU, "
          f"{size / 1e6 / best:.2f} MB/s")
    if args.compare:
        ours = json.load(open(args.compare, encoding="utf-8"))
        differ = 0
        for t, o in zip(texts, ours):
            ids = tok.encode(t, add_special_tokens=False).ids
            if o["ids"] != ids or o["decoded"] != tok.decode(ids, skip_special_tokens=False):
                differ += 1
                if differ <= 3:
                    print(f"differs: {t[:80]!r}", file=sys.stderr)
        print(f"compare: {len(texts)} strings, {differ} differ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
