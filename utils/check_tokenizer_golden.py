#!/usr/bin/env python3
"""Compare amk-tokenize --batch output with a tokenizers golden.json.

Usage: check_tokenizer_golden.py GOLDEN OUT
       check_tokenizer_golden.py --texts GOLDEN      (print the texts as JSON)

GOLDEN is a list of {"text", "ids", "ids_with_special", "decoded"} from the
tokenizers package; OUT is amk-tokenize --batch's answer for the texts, in
order. Prints each case that differs (the first 10) and a summary line;
exits 1 when any differs.
"""
import json
import sys

FIELDS = ("ids", "ids_with_special", "decoded")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--texts":
        golden = json.load(open(sys.argv[2], encoding="utf-8"))
        json.dump([case["text"] for case in golden], sys.stdout)
        return 0
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    golden = json.load(open(sys.argv[1], encoding="utf-8"))
    out = json.load(open(sys.argv[2], encoding="utf-8"))
    if len(out) != len(golden):
        print(f"{len(out)} answers for {len(golden)} cases")
        return 1
    bad = 0
    for i, (want, got) in enumerate(zip(golden, out)):
        wrong = [f for f in FIELDS if want[f] != got.get(f)]
        if not wrong:
            continue
        bad += 1
        if bad <= 10:
            print(f"case {i} {want['text'][:60]!r}:")
            for f in wrong:
                print(f"  {f}: want {want[f]!r:.200}")
                print(f"  {f}: got  {got.get(f)!r:.200}")
    print(f"{len(golden)} cases, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
