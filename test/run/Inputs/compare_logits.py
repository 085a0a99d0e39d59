"""Compares --dump-logits files: the first is the reference; every other must
have as many rows and agree with it within 1e-5 of the largest |logit|."""
import json
import sys

ref = json.load(open(sys.argv[1]))
scale = max(max(abs(v) for v in row) for row in ref)
for path in sys.argv[2:]:
    rows = json.load(open(path))
    if len(rows) != len(ref):
        sys.exit(f"{path}: {len(rows)} rows, the reference has {len(ref)}")
    worst = max(abs(a - b) for r, g in zip(ref, rows) for a, b in zip(r, g))
    if worst > 1e-5 * max(scale, 1.0):
        sys.exit(f"{path}: max |diff| {worst} exceeds 1e-05 of the scale {scale}")
print(f"{len(ref)} rows, {len(sys.argv) - 2} files within 1e-05 of the first")
