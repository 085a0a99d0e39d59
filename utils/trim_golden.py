#!/usr/bin/env python3
"""Trim a fixture's golden.json for a bundled example.

    trim_golden.py GOLDEN OUT [--positions 0,5,6]

Keeps the prompt, the greedy continuation, the sequence, the texts and the
notes as they are, and of the teacher-forced logits only the rows at
--positions (none when not given): `logits` then holds those rows and
`logit_positions` their positions in the sequence. Every other list of rows
(such as golden-bf16.json's logits_on_golden_json_sequence) is dropped, and
a `trimmed` key says so.
utils/check_golden.py compares a trimmed golden at the positions it keeps.
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("golden")
    ap.add_argument("out")
    ap.add_argument("--positions", default="")
    args = ap.parse_args()
    with open(args.golden) as f:
        golden = json.load(f)
    positions = [int(p) for p in args.positions.split(",") if p]
    trimmed = {}
    for key, value in golden.items():
        is_rows = isinstance(value, list) and value and isinstance(value[0], list)
        if not is_rows:
            trimmed[key] = value
    if positions:
        rows = golden["logits"]
        trimmed["logit_positions"] = positions
        trimmed["logits"] = [rows[p] for p in positions]
    kept = f"logits kept at logit_positions {positions}" if positions else "no logits kept"
    trimmed["trimmed"] = f"by utils/trim_golden.py from the fixture's {args.golden.split('/')[-1]}: " \
                         f"{kept}"
    # One key a line: small diffs, and no line per number.
    lines = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in trimmed.items()]
    with open(args.out, "w") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")


if __name__ == "__main__":
    main()
