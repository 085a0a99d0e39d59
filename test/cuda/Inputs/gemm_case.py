#!/usr/bin/env python3
"""GEMM_TILE test programs, their weights and an independent reference
(Python standard library only).

  gemm_case.py program NAME OUT.amkir   write the program of case NAME
  gemm_case.py weights NAME DIR         write DIR/model.safetensors for it
  gemm_case.py check NAME DIR LOGITS.json [--rtol R]
      compare the first row of amk-run --dump-logits (the case's output,
      flattened) with out = x W^T (+ b) computed here in double from the
      checkpoint's values: each element within R * |ref| + R * max |ref|
      (R: 2^-7 for a bf16/f16 output, 1e-5 for f32). Prints `NAME: N
      outputs match (max |diff| D)` or the first mismatches and exits 1.
  gemm_case.py names                    the case names (the benchmarks,
                                        bench and bench-wide, are not listed)
  gemm_case.py qnames                   the weight-only quantized cases'
                                        names (q8-bench, q4-bench not listed)

A case is out[M, N] = x[M, K] W[N, K]^T (+ bias[N]), x and W in one dtype,
cut into GEMM_TILE tasks by its row and column splits. Inputs are in the
checkpoint (x is a WEIGHT buffer, so no activation feeds it); values are
multiples of 1/16 in [-1/2, 1/2] (exact in bf16 and f16) from a seeded
formula, so the products and sums the reference forms are exact in double.

A quantized case (QCASES) is out[M, N] = x[M, K] (q[N, K] * scale[N, K /
group])^T, the quantize pass's format (docs/Quantization.md): W is the
buffer `w`, i8 [N, K] (int8) or i4 [N, K] (int4, stored as u8 [N, K/2] of
q + 8 nibbles, column 2b in the low nibble), with the f16 scales
`w.scales` [N, ceil(K/group)]; the tasks carry qdtype and group. q is an
integer from a seeded formula over the whole range ([-127, 127] or
[-8, 7]), each scale a multiple of 1/64 in [1/64, 7/64] (exact in f16),
so the reference's sums are exact in double as well.
"""
import json
import struct
import sys

# name: (M, K, N, input dtype, output dtype, bias dtype or None,
#        row splits (M_tile of each task row), column splits (N_tile each))
CASES = {
    # By hand: 2 x 4 x 3, checked against literal values in gemm-vm.test.
    "tiny": (2, 4, 3, "bf16", "f32", "f32", [1, 1], [2, 1]),
    # Whole 128 x 128 sub-tiles, several per task, two tasks splitting N.
    "aligned": (256, 256, 512, "bf16", "bf16", None, [256], [256, 256]),
    # Nothing a multiple of the tile: M 200, N 300, K 72 (K % 32 = 8),
    # splits at odd places, a bias.
    "ragged": (200, 72, 300, "bf16", "f32", "bf16", [77, 123], [130, 37, 133]),
    # f16 inputs and output, one task of two sub-tiles with a short last one.
    "f16": (64, 136, 192, "f16", "f16", None, [64], [192]),
    # bf16 output of even width split at an odd column (n_off 67): the
    # paired 16-bit stores must not assume an even column.
    "odd-split": (96, 40, 200, "bf16", "bf16", None, [96], [67, 133]),
    # A tall thin task (M 512 in one task: four sub-tile rows) with an f32
    # output of an odd width.
    "tall": (512, 64, 45, "bf16", "f32", None, [512], [45]),
}
# The microbenchmark: one 512 x 8192 x 2048 GEMM (Llama-3.2-1B's gate|up
# projection over a 512-token prompt) in tasks of one sub-tile each: 256
# tasks of 128 x 128 (bench: about two per SM of an H100) or 128 of
# 128 x 256 (bench-wide, for AMK_CUDA_GEMM_TILE_N=256: one wave).
BENCH = {
    "bench": (512, 2048, 8192, "bf16", "bf16", None, [128] * 4, [128] * 64),
    "bench-wide": (512, 2048, 8192, "bf16", "bf16", None, [128] * 4, [256] * 32),
}


# Weight-only quantized: name: (M, K, N, x dtype, output dtype, qdtype,
#        group, row splits, column splits).
QCASES = {
    # int8 in whole 128 x 128 sub-tiles, two groups of 128 per row.
    "q8-aligned": (256, 256, 256, "bf16", "bf16", "int8", 128, [256], [128, 128]),
    # int4, nothing a multiple of the tile: K 72 is no multiple of the
    # group (32 + 32 + 8) nor of the 32-column K step; odd splits.
    "q4-ragged": (200, 72, 300, "bf16", "f32", "int4", 32, [77, 123], [130, 37, 133]),
    # int8, f16, a group of 48 columns (scaled every 16-column step) that
    # does not divide K = 136; int8 rows of 136 bytes (8-byte copies).
    "q8-g48": (64, 136, 192, "f16", "f16", "int8", 48, [64], [192]),
    # int4, one group wider than K (scaled once at the end), a bf16 output
    # split at an odd column.
    "q4-one-group": (96, 200, 200, "bf16", "bf16", "int4", 256, [96], [67, 133]),
    # int8, a tall task of 512 rows in 64-column tasks (64-column sub-tiles).
    "q8-tall": (512, 128, 128, "bf16", "f32", "int8", 64, [512], [64, 64]),
    # f32 activations: the CUDA-core quantized GEMM (at most 64 rows), int8
    # with 16-byte pieces, and int4 with a group of 24 (no whole pieces:
    # column at a time).
    "q8-f32": (48, 96, 80, "f32", "f32", "int8", 32, [20, 28], [40, 40]),
    "q4-f32-g24": (40, 96, 72, "f32", "f32", "int4", 24, [40], [72]),
    # bf16 activations with a group of 24 (no whole 16-column steps): the
    # CUDA-core path too.
    "q4-bf16-g24": (32, 96, 72, "bf16", "bf16", "int4", 24, [32], [72]),
}
# The quantized microbenchmarks: BENCH's 512 x 8192 x 2048 in int8 and int4
# (group 128), 256 tasks of 128 x 128.
QBENCH = {
    "q8-bench": (512, 2048, 8192, "bf16", "bf16", "int8", 128, [128] * 4, [128] * 64),
    "q4-bench": (512, 2048, 8192, "bf16", "bf16", "int4", 128, [128] * 4, [128] * 64),
}


def qcase(name):
    if name in QBENCH:
        return QBENCH[name]
    return QCASES.get(name)


def case(name):
    if name in BENCH:
        return BENCH[name]
    q = qcase(name)
    if q:
        m, k, n, xdt, odt, _, _, rows, cols = q
        return (m, k, n, xdt, odt, None, rows, cols)
    if name not in CASES:
        sys.exit("gemm_case.py: no case '%s' (have %s, %s, %s, %s)"
                 % (name, ", ".join(CASES), ", ".join(BENCH), ", ".join(QCASES),
                    ", ".join(QBENCH)))
    return CASES[name]


def value(seed, i):
    return (((i * 7 + seed * 13 + (i // 5) * 3) % 17) - 8) / 16.0


def qtensors(name):
    """x, the integers q [N * K] and the scales [N * ceil(K / group)]."""
    m, k, n, _, _, qdt, group, _, _ = qcase(name)
    qmax = 127 if qdt == "int8" else 7
    span = 2 * qmax + 1 if qdt == "int8" else 16  # int4 reaches -8
    lo = -qmax if qdt == "int8" else -8
    ng = (k + group - 1) // group
    q = [lo + (i * 37 + (i // k) * 11) % span for i in range(n * k)]
    s = [(1 + (i * 5 + (i // ng) * 3) % 7) / 64.0 for i in range(n * ng)]
    return {"x": [value(1, i) for i in range(m * k)], "q": q, "s": s}


def tensors(name):
    if qcase(name):
        t = qtensors(name)
        m, k, n, _, _, _, group, _, _ = qcase(name)
        ng = (k + group - 1) // group
        w = [t["q"][i] * t["s"][(i // k) * ng + (i % k) // group] for i in range(n * k)]
        return {"x": t["x"], "w": w}
    m, k, n, _, _, bdt, _, _ = case(name)
    if name == "tiny":
        x = [1, 2, 0, -1,
             0.5, 0, 1, 2]
        w = [1, 0, 0, 0,
             0, 1, 1, 0,
             0.25, 0.25, 0.25, 0.25]
        b = [0, 10, -1]
        return {"x": x, "w": w, "b": b}
    t = {"x": [value(1, i) for i in range(m * k)], "w": [value(2, i) for i in range(n * k)]}
    if bdt:
        t["b"] = [value(3, i) for i in range(n)]
    return t


def qprogram(name):
    m, k, n, xdt, odt, qdt, group, rows, cols = qcase(name)
    assert sum(rows) == m and sum(cols) == n
    qcode = 6 if qdt == "int8" else 7
    ng = (k + group - 1) // group
    lines = ["; GEMM_TILE case '%s': out[%d, %d] = x[%d, %d] (%s W[%d, %d], group %d)^T "
             "(gemm_case.py)" % (name, m, n, m, k, qdt, n, k, group),
             "amkir 0.2.0, abi 0.2", 'model "."', "target h200",
             'meta {model = "gemm-%s"}' % name,
             "buffer %token_id : i32[1] io_input",
             'buffer %%x : %s[%d, %d] weight source "x"' % (xdt, m, k),
             'buffer %%w : %s[%d, %d] weight source "w"' % ("i8" if qdt == "int8" else "i4", n, k),
             'buffer %%w.scales : f16[%d, %d] weight source "w.scales"' % (n, ng),
             "buffer %%out : %s[%d, %d] io_output" % (odt, m, n),
             'counter #out "gemm"']
    tid, m_off = 0, 0
    for mt in rows:
        n_off = 0
        for nt in cols:
            lines.append("task %d gemm_tile(%%x, %%w, %%w.scales) -> %%out signal #out {K = %d, "
                         "N_tile = %d, n_off = %d, M_tile = %d, m_off = %d, qdtype = %d, "
                         "group = %d} label \"gemm[%d]\""
                         % (tid, k, nt, n_off, mt, m_off, qcode, group, tid))
            tid += 1
            n_off += nt
        m_off += mt
    return "\n".join(lines) + "\n"


def program(name):
    if qcase(name):
        return qprogram(name)
    m, k, n, xdt, odt, bdt, rows, cols = case(name)
    assert sum(rows) == m and sum(cols) == n
    lines = ["; GEMM_TILE case '%s': out[%d, %d] = x[%d, %d] W[%d, %d]^T%s (gemm_case.py)"
             % (name, m, n, m, k, n, k, " + b" if bdt else ""),
             "amkir 0.2.0, abi 0.2", 'model "."', "target h200",
             'meta {model = "gemm-%s"}' % name,
             "buffer %token_id : i32[1] io_input",
             'buffer %%x : %s[%d, %d] weight source "x"' % (xdt, m, k),
             'buffer %%w : %s[%d, %d] weight source "w"' % (xdt, n, k)]
    if bdt:
        lines.append('buffer %%b : %s[%d] weight source "b"' % (bdt, n))
    lines.append("buffer %%out : %s[%d, %d] io_output" % (odt, m, n))
    lines.append('counter #out "gemm"')
    ins = "%x, %w, %b" if bdt else "%x, %w"
    tid, m_off = 0, 0
    for mt in rows:
        n_off = 0
        for nt in cols:
            lines.append("task %d gemm_tile(%s) -> %%out signal #out {K = %d, N_tile = %d, "
                         "n_off = %d, M_tile = %d, m_off = %d} label \"gemm[%d]\""
                         % (tid, ins, k, nt, n_off, mt, m_off, tid))
            tid += 1
            n_off += nt
        m_off += mt
    return "\n".join(lines) + "\n"


def encode(vals, dt):
    if dt == "f32":
        return struct.pack("<%df" % len(vals), *vals), "F32"
    if dt == "f16":
        return struct.pack("<%de" % len(vals), *vals), "F16"
    # bf16: the values are exact, so the top half of the f32 bits.
    raw = struct.pack("<%df" % len(vals), *vals)
    return b"".join(raw[i + 2:i + 4] for i in range(0, len(raw), 4)), "BF16"


def qencoded(name):
    """key: (bytes, safetensors dtype, shape) of a quantized case."""
    m, k, n, xdt, _, qdt, group, _, _ = qcase(name)
    t = qtensors(name)
    ng = (k + group - 1) // group
    out = {"x": encode(t["x"], xdt) + ([m, k],),
           "w.scales": encode(t["s"], "f16") + ([n, ng],)}
    if qdt == "int8":
        out["w"] = (struct.pack("<%db" % (n * k), *t["q"]), "I8", [n, k])
    else:
        q = t["q"]
        packed = bytes((q[r * k + 2 * b] + 8) | ((q[r * k + 2 * b + 1] + 8) << 4)
                       for r in range(n) for b in range(k // 2))
        out["w"] = (packed, "U8", [n, k // 2])
    return out


def weights(name, out_dir):
    if qcase(name):
        enc = qencoded(name)
    else:
        m, k, n, xdt, _, bdt, _, _ = case(name)
        t = tensors(name)
        shapes = {"x": ([m, k], xdt), "w": ([n, k], xdt), "b": ([n], bdt)}
        enc = {key: encode(t[key], shapes[key][1]) + (shapes[key][0],) for key in t}
    header, blobs, off = {}, [], 0
    for key in sorted(enc):
        data, st, shape = enc[key]
        header[key] = {"dtype": st, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(out_dir + "/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def reference(name):
    m, k, n, _, _, bdt, _, _ = case(name)
    t = tensors(name)
    x, w, b = t["x"], t["w"], t.get("b")
    out = []
    for i in range(m):
        xr = x[i * k:(i + 1) * k]
        for j in range(n):
            wr = w[j * k:(j + 1) * k]
            s = sum(a * c for a, c in zip(xr, wr))
            out.append(s + (b[j] if b else 0.0))
    return out


def check(name, logits_path, rtol):
    got = json.load(open(logits_path))[0]
    ref = reference(name)
    if len(got) != len(ref):
        print("%s: %d outputs, want %d" % (name, len(got), len(ref)))
        return 1
    scale = max(abs(v) for v in ref) or 1.0
    bad, worst = [], 0.0
    for i, (g, r) in enumerate(zip(got, ref)):
        d = abs(g - r) if g == g else float("inf")
        worst = max(worst, d)
        if d > rtol * abs(r) + rtol * scale:
            bad.append((i, g, r))
    if bad:
        n = case(name)[2]
        for i, g, r in bad[:8]:
            print("%s: out[%d, %d] = %r, want %r" % (name, i // n, i % n, g, r))
        print("%s: %d of %d outputs differ (max |diff| %g)" % (name, len(bad), len(ref), worst))
        return 1
    print("%s: %d outputs match (max |diff| %g)" % (name, len(ref), worst))
    return 0


def main():
    a = sys.argv[1:]
    if a[:1] == ["names"]:
        print(" ".join(CASES))
        return 0
    if a[:1] == ["qnames"]:
        print(" ".join(QCASES))
        return 0
    if len(a) >= 3 and a[0] == "program":
        open(a[2], "w").write(program(a[1]))
        return 0
    if len(a) >= 3 and a[0] == "weights":
        weights(a[1], a[2])
        return 0
    if len(a) >= 4 and a[0] == "check":
        odt = case(a[1])[4]
        rtol = 1e-5 if odt == "f32" else 2.0 ** -7
        if "--rtol" in a:
            rtol = float(a[a.index("--rtol") + 1])
        return check(a[1], a[3], rtol)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
