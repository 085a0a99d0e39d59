#!/usr/bin/env python3
"""amk-mutate: derive unsafe (or deliberately safe) variants of a real lowering.

  amk-mutate.py KIND IN.json [-o OUT.json]
  amk-mutate.py --list

Each KIND targets one validator check that the conformance population does
not exercise (or exercises only one way). The input is a reference-style
decode lowering such as shared/conformance/toy2L_pos0.amk.json; tasks are
found by label, so any layer count or tiling works. Output is JSON in the
reference's format (json.dumps indent=2). Standard library only.
"""
import argparse
import json
import os
import re
import sys


def by_label(prog, suffix):
    for t in prog["tasks"]:
        if t["label"].endswith(suffix):
            return t
    sys.exit(f"amk-mutate: no task labelled *{suffix}")


def buffer_named(prog, name):
    for b in prog["buffers"]:
        if b["name"] == name:
            return b
    sys.exit(f"amk-mutate: no buffer named {name}")


def tiles_of(prog, prefix):
    ts = [t for t in prog["tasks"] if t["label"].startswith(prefix + "[t")]
    if len(ts) < 2:
        sys.exit(f"amk-mutate: {prefix} needs at least 2 tiles")
    return ts


def new_counter(prog, note):
    cid = len(prog["counters"])
    prog["counters"].append({"id": cid, "init": 0, "note": note})
    return cid


def renumber(prog):
    """Make task ids list positions again after reordering the task list."""
    old_to_new = {t["id"]: i for i, t in enumerate(prog["tasks"])}
    for i, t in enumerate(prog["tasks"]):
        t["id"] = i
    cfg = prog.get("config")
    if cfg and isinstance(cfg.get("sm_assignment"), dict):
        cfg["sm_assignment"] = {str(old_to_new[int(k)]): v
                                for k, v in cfg["sm_assignment"].items()}


# ---- mutations ---------------------------------------------------------------

def waw_overlap(p):
    """Two tiles of one projection write overlapping columns."""
    t0, t1 = tiles_of(p, "L0.q_proj")[:2]
    t1["params"]["n_off"] = t0["params"]["n_off"] + t0["params"]["N_tile"] // 2


def waw_unordered(p):
    """One tile of a projection signals its own counter: writers share none."""
    ts = tiles_of(p, "L0.o_proj")
    c = new_counter(p, "split o_proj tile")
    ts[-1]["out_counter"] = c
    # Keep every reader ordered after all writers (so only WAW can fire).
    for t in p["tasks"]:
        if any(w["counter"] == ts[0]["out_counter"] for w in t["waits"]):
            for w in t["waits"]:
                if w["counter"] == ts[0]["out_counter"]:
                    w["threshold"] = len(ts) - 1
            t["waits"].append({"counter": c, "threshold": 1})


def waw_ordered(p):
    """SAFE: a second, whole-buffer writer ordered after the first (a total
    happens-before order of the writers)."""
    norm = by_label(p, "L0.post_norm")
    c = new_counter(p, "rewrite L0.mn")
    for t in p["tasks"]:
        for w in t["waits"]:
            if w["counter"] == norm["out_counter"]:
                w["counter"] = c  # readers now wait for the second writer
    again = dict(norm, id=len(p["tasks"]), out_counter=c,
                 waits=[{"counter": norm["out_counter"], "threshold": 1}],
                 label="L0.post_norm.again")
    p["tasks"].append(again)


def pages_alias(p):
    """Two buffers written by parallel tasks share one page."""
    q, k = buffer_named(p, "L0.q"), buffer_named(p, "L0.k")
    p["pages"] = {"buffer_to_page": {str(q["id"]): 0, str(k["id"]): 0},
                  "pages": [{"id": 0, "space": "GLOBAL_SCRATCH", "nbytes": 256,
                             "live_start": -1, "live_end": -1}]}


def pages_ordered(p):
    """SAFE: every use of L0.an precedes the writer of L0.mn (same page)."""
    a, b = buffer_named(p, "L0.an"), buffer_named(p, "L0.mn")
    p["pages"] = {"buffer_to_page": {str(a["id"]): 0, str(b["id"]): 0},
                  "pages": [{"id": 0, "space": "GLOBAL_SCRATCH", "nbytes": 256,
                             "live_start": -1, "live_end": -1}]}


def pages_missing_buffer(p):
    """A page binding names a buffer that does not exist."""
    pages_ordered(p)
    p["pages"]["buffer_to_page"]["999"] = 0


def onchip_across_sms(p):
    """An SMEM buffer written on SM 0 and read on SM 1."""
    buffer_named(p, "L0.an")["space"] = "SMEM"
    by_label(p, "L0.input_norm")["sm"] = 0
    tiles_of(p, "L0.q_proj")[0]["sm"] = 1


def onchip_unassigned(p):
    """SAFE with a warning: an SMEM buffer before SM assignment."""
    buffer_named(p, "L0.an")["space"] = "SMEM"


def sm_queue_order(p):
    """Consumer before its producer in one SM's queue."""
    i = p["tasks"].index(by_label(p, "L0.input_norm"))
    p["tasks"][i - 1], p["tasks"][i] = p["tasks"][i], p["tasks"][i - 1]
    renumber(p)
    p["tasks"][i - 1]["sm"] = 0
    p["tasks"][i]["sm"] = 0


def sm_out_of_range(p):
    p["tasks"][0]["sm"] = p["target"]["num_sms"]


def ids_not_positions(p):
    """SAFE: task ids are not list positions (nothing refers to task ids)."""
    for t in p["tasks"]:
        t["id"] += 1000


def write_read_only(p):
    """A new, unordered task overwrites an IO_INPUT others read."""
    src = buffer_named(p, "reshape_id0")
    c = new_counter(p, "clobber")
    p["tasks"].append({"id": len(p["tasks"]), "op": "COPY", "inputs": [src["id"]],
                       "outputs": [src["id"]], "out_counter": c, "waits": [],
                       "params": {}, "sm": None, "est_bytes": 0, "est_flops": 0,
                       "label": "clobber"})


def k_mismatch(p):
    by_label(p, "L0.q_proj[t0]")["params"]["K"] += 1


def tile_overflow(p):
    last = tiles_of(p, "L0.q_proj")[-1]
    last["params"]["n_off"] += last["params"]["N_tile"]


def zero_k(p):
    by_label(p, "L0.q_proj[t0]")["params"]["K"] = 0


def kv_pos_out_of_range(p):
    t = by_label(p, "L0.k_append")
    cache = next(b for b in p["buffers"] if b["id"] == t["outputs"][0])
    t["params"]["pos"] = cache["shape"][0]


def kv_window_overflow(p):
    t = by_label(p, "L0.attention")
    cache = next(b for b in p["buffers"] if b["id"] == t["inputs"][1])
    t["params"]["kv_len"] = cache["shape"][0] + 1


def kv_len_zero(p):
    by_label(p, "L0.attention")["params"]["kv_len"] = 0


def heads_not_divisible(p):
    t = by_label(p, "L0.attention")
    t["params"]["n_kv_heads"] = t["params"]["n_heads"] + 1


def head_dim_mismatch(p):
    by_label(p, "L0.attention")["params"]["head_dim"] *= 2


def hidden_mismatch(p):
    by_label(p, "L0.input_norm")["params"]["hidden"] //= 2


def norm_rows(p):
    """An RMSNORM whose rows do not tile its input (hidden does not divide
    the width): only whole rows of `hidden` are normalized."""
    norm = by_label(p, "L0.input_norm")
    norm["params"]["hidden"] = norm["params"]["hidden"] * 3 // 4


def norm_flags(p):
    """An RMSNORM flag bit that no variant defines (bit 2 is (1 + w))."""
    by_label(p, "L0.input_norm")["params"]["flags"] = 8


def norm_plus_one(p):
    """SAFE: Gemma's (1 + w) RMSNORM variant, flags bit 2."""
    by_label(p, "L0.input_norm")["params"]["flags"] = 4


def gelu_flags(p):
    """A GELU flag bit that no variant defines (bit 2 is the tanh form)."""
    by_label(p, "L0.gelu")["params"]["flags"] = 5


def rope_odd_head_dim(p):
    by_label(p, "L0.rope_q")["params"]["head_dim"] -= 1


def shape_float(p):
    b = buffer_named(p, "L0.an")
    b["shape"][-1] = b["shape"][-1] + 0.5


def shape_zero(p):
    buffer_named(p, "L0.an")["shape"][-1] = 0


# ---- fused GEMV patterns (input: a tiled and fused program, e.g. from
# `amk-opt test/validate/Inputs/fused-tiny -import -tile -fuse`) --------------

def pattern_tiles(p, pattern):
    ts = [t for t in p["tasks"] if t["op"] == "GEMV_TILE"
          and t["params"].get("flags", 0) >> 16 == pattern]
    if not ts:
        sys.exit(f"amk-mutate: no GEMV tile with pattern {pattern}")
    return ts


def buffer_by_id(p, bid):
    for b in p["buffers"]:
        if b["id"] == bid:
            return b
    sys.exit(f"amk-mutate: no buffer {bid}")


def new_const(p, name, shape):
    bid = max(b["id"] for b in p["buffers"]) + 1
    p["buffers"].append({"id": bid, "name": name, "kind": "CONST", "dtype": "F32",
                         "shape": shape, "space": "HBM", "source": None})
    return bid


def pattern_count():
    """The GEMV patterns in include/amk/tables.h (AMK_GEMV_PATTERNS' rows),
    so that an unknown one stays unknown when a pattern is added."""
    tables = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include", "amk",
                          "tables.h")
    with open(tables) as f:
        text = f.read()
    body = text[text.index("#define AMK_GEMV_PATTERNS(X)"):]
    body = body[:body.index("\n\n")]
    return 1 + max(int(n) for n in re.findall(r"X\(\w+, (\d+),", body))


def pattern_unknown(p):
    """A GEMV tile whose flags name the first pattern past the table."""
    t = pattern_tiles(p, 1)[0]
    t["params"]["flags"] = pattern_count() << 16


def pattern_inputs(p):
    """A norm tile without its norm weight (2 inputs, the pattern reads 3)."""
    t = pattern_tiles(p, 1)[0]
    t["inputs"] = t["inputs"][:2]


def pattern_norm_weight(p):
    """A norm tile whose norm weight is not K elements."""
    t = pattern_tiles(p, 1)[0]
    t["inputs"][2] = new_const(p, "bad_norm", [32])


def pattern_residual_size(p):
    """A residual tile whose residual is not the output's size."""
    t = pattern_tiles(p, 2)[0]
    t["inputs"][2] = new_const(p, "bad_residual", [1, 32])


def pattern_gu_shape(p):
    """A silu_residual tile whose gate|up input is [3, K], not [2, K]."""
    t = pattern_tiles(p, 4)[0]
    k = t["params"]["K"]
    t["inputs"][0] = new_const(p, "bad_gu", [3, k])


def pattern_qkv_width(p):
    """A rope_kv tile claiming more query heads than the qkv vector holds."""
    t = pattern_tiles(p, 5)[0]
    t["params"]["n_heads"] += 2 * t["params"]["n_kv_heads"]


def pattern_inv_freq(p):
    """rope_kv reads inverse frequencies that are not head_dim/2 long."""
    t = pattern_tiles(p, 5)[0]
    t["inputs"][1] = new_const(p, "bad_inv_freq", [t["params"]["head_dim"]])


def pattern_rope_odd(p):
    """A rope_kv tile with an odd head_dim."""
    pattern_tiles(p, 5)[0]["params"]["head_dim"] -= 1


def pattern_rope_cache(p):
    """The rope_kv cache is neither [max_seq, 2, n_kv*head_dim] nor per head [max_seq, 2, head_dim]."""
    t = pattern_tiles(p, 5)[0]
    buffer_by_id(p, t["outputs"][0])["shape"][1] = 3


def pattern_rope_heads(p):
    """A rope_kv tile for a KV head past n_kv_heads."""
    t = pattern_tiles(p, 5)[-1]
    t["params"]["n_off"] = t["params"]["n_kv_heads"]


def pattern_perhead_rope_tile(p):
    """A rope_kv tile of two KV heads writing a per-head cache (holds one)."""
    t = pattern_tiles(p, 5)[0]
    t["params"]["n_off"] = 0
    t["params"]["N_tile"] = 2


def pattern_perhead_attn_span(p):
    """An attention_rope tile of two whole GQA groups over a per-head cache."""
    t = pattern_tiles(p, 7)[0]
    group = t["params"]["n_heads"] // t["params"]["n_kv_heads"]
    t["params"]["n_off"] = 0
    t["params"]["N_tile"] = 2 * group


def pattern_rope_pos(p):
    """rope_kv appends at a row past the cache's end."""
    t = pattern_tiles(p, 5)[0]
    t["params"]["pos"] = buffer_by_id(p, t["outputs"][0])["shape"][0]


def pattern_missing_param(p):
    """A rope_kv tile without its pos param."""
    del pattern_tiles(p, 5)[0]["params"]["pos"]


def pattern_attn_heads(p):
    """An attention_rope tile for query heads past n_heads."""
    t = pattern_tiles(p, 7)[-1]
    t["params"]["n_off"] += 1


def pattern_attn_group(p):
    """An attention_rope tile straddling two GQA groups (no overlap)."""
    ts = pattern_tiles(p, 7)
    group = ts[0]["params"]["N_tile"]
    ts[0]["params"]["n_off"] = group - 1
    ts[0]["params"]["N_tile"] = 2
    ts[1]["params"]["n_off"] = group + 1
    ts[1]["params"]["N_tile"] = group - 1


def pattern_attn_window(p):
    """An attention_rope tile whose window runs past the cache."""
    t = pattern_tiles(p, 7)[0]
    t["params"]["kv_len"] = buffer_by_id(p, t["inputs"][2])["shape"][0] + 1


def pattern_attn_divisible(p):
    """An attention_rope tile with n_heads not divisible by n_kv_heads."""
    t = pattern_tiles(p, 7)[0]
    t["params"]["n_kv_heads"] = t["params"]["n_heads"] - 1


def pattern_attn_cache(p):
    """An attention tile (pattern 6) whose caches do not hold n_kv_heads."""
    t = pattern_tiles(p, 6)[0]
    t["params"]["n_kv_heads"] = 1


def pattern_attn_query(p):
    """An attention tile (pattern 6) whose q is not n_heads*head_dim wide."""
    t = pattern_tiles(p, 6)[0]
    t["params"]["n_heads"] = t["params"]["n_kv_heads"]
    t["params"]["n_off"] = 0
    t["params"]["N_tile"] = 1


def pattern_attn_partial(p):
    """A split-KV attention tile writing its partial buffer as a whole one."""
    t = pattern_tiles(p, 6)[0]
    t["params"]["flags"] &= ~2


# ---- attention_rope taking row pos from qkv (flags bit 2; input: a fused
# unsplit program such as `amk-opt test/validate/Inputs/fused-tiny -import
# -tile -fuse`, whose attention tiles carry the bit) ---------------------------

KV_FROM_QKV = 4


def at_pos(p, pos):
    """The program one step later: meta.pos, rope_kv's row and the
    attention windows [0, pos + 1) at `pos` (not a mutation by itself)."""
    p["meta"]["pos"] = pos
    p["meta"]["kv_len"] = pos + 1
    for t in pattern_tiles(p, 5):
        t["params"]["pos"] = pos
    for t in pattern_tiles(p, 7):
        t["params"]["kv_start"] = 0
        t["params"]["kv_len"] = pos + 1


def fresh_at_pos3(p):
    """(Safe) the flagged program at pos 3: its attention tiles read cache
    rows 0..2, which rope_kv (row 3) does not write; no wait on it needed."""
    at_pos(p, 3)


def fresh_no_flag(p):
    """At pos 3 an attention_rope tile without the flag (it reads row pos
    from the cache) still waits on qkv only: rope_kv's row 3 races."""
    at_pos(p, 3)
    pattern_tiles(p, 7)[0]["params"]["flags"] &= ~KV_FROM_QKV


def fresh_no_qkv_wait(p):
    """A flagged attention_rope tile without its wait on qkv: it reads q,
    k and v of tiles nothing orders before it."""
    t = pattern_tiles(p, 7)[0]
    qkv_counter = next(u["out_counter"] for u in p["tasks"] if u["outputs"][0] == t["inputs"][0])
    t["waits"] = [w for w in t["waits"] if w["counter"] != qkv_counter]


def fresh_rope_row(p):
    """At pos 3 the rope_kv task of KV head 0 writes row 2, which the
    flagged tiles read (below pos) with no wait on it: a race."""
    at_pos(p, 3)
    pattern_tiles(p, 5)[0]["params"]["pos"] = 2


def fresh_window(p):
    """At pos 3 a flagged tile's window [0, 5) reaches past row pos."""
    at_pos(p, 3)
    pattern_tiles(p, 7)[0]["params"]["kv_len"] = 5


def fresh_on_attention(p):
    """An attention tile (pattern 6) with flags bit 2 (attention_rope's)."""
    pattern_tiles(p, 6)[0]["params"]["flags"] |= KV_FROM_QKV


# ---- combine_residual (input: a split-KV program with the combine folded,
# e.g. `amk-opt test/validate/Inputs/fused-tiny -import -tile
# --kv-partitions=2 -fuse`) --------------------------------------------------

COMBINE_RESIDUAL = 8


def combine_tile(p, last=False):
    return pattern_tiles(p, COMBINE_RESIDUAL)[-1 if last else 0]


def pattern_comb_inputs(p):
    """A combine_residual tile reading only [p0, W] (it needs 3 to 8 inputs)."""
    t = combine_tile(p)
    t["inputs"] = t["inputs"][:2]


def pattern_comb_arity(p):
    """A tile reading [p0, W, r, p1] whose flags say plain: 4 inputs are too
    many for a plain tile (only combine_residual and the quantized norm,
    residual and silu_residual tiles take more than 3)."""
    t = combine_tile(p)
    t["params"]["flags"] = 0


def pattern_comb_k(p):
    """A combine_residual tile whose K is not n_heads * head_dim."""
    combine_tile(p)["params"]["head_dim"] //= 2


def pattern_comb_partial(p):
    """A combine_residual tile whose partial 1 (input 3) is not
    [n_heads, head_dim + 2]."""
    t = combine_tile(p)
    size = buffer_by_id(p, t["inputs"][3])["shape"][-1]
    t["inputs"][3] = new_const(p, "bad_partial", [1, size - 2])


def pattern_comb_weight(p):
    """A combine_residual tile whose W rows are not K wide."""
    t = combine_tile(p)
    rows = buffer_by_id(p, t["inputs"][1])["shape"][0]
    t["inputs"][1] = new_const(p, "bad_weight", [rows, t["params"]["K"] // 2])


def pattern_comb_residual(p):
    """A combine_residual tile whose residual is not the output's size."""
    t = combine_tile(p)
    t["inputs"][2] = new_const(p, "bad_residual", [1, 32])


def pattern_comb_missing_param(p):
    """A combine_residual tile without n_heads."""
    del combine_tile(p)["params"]["n_heads"]


def pattern_comb_tile(p):
    """The last combine_residual tile writes past the output's columns."""
    t = combine_tile(p, last=True)
    t["params"]["n_off"] += t["params"]["N_tile"]


def race_comb_partial(p):
    """A combine_residual tile reads, as partial 1, a buffer written after it
    (gate|up): nothing orders the writers before the read."""
    t = combine_tile(p)
    gu = next(u for u in p["tasks"] if u["label"].startswith("L0.gate_up_proj"))
    t["inputs"][3] = gu["outputs"][0]


def cover_comb_partial(p):
    """Partition 1's tile of KV head 1 is gone: the o_proj tiles read
    partial 1 (input 3) with heads nobody wrote."""
    drop_task(p, by_label(p, "L0.attention[p1.kv1]"))


def drop_task(p, t):
    """Delete task t: waits on its counter expect one producer fewer (and go
    away when it was the only one)."""
    c = t["out_counter"]
    p["tasks"].remove(t)
    left = sum(1 for u in p["tasks"] if u["out_counter"] == c)
    for u in p["tasks"]:
        if left:
            for w in u["waits"]:
                if w["counter"] == c:
                    w["threshold"] = left
        else:
            u["waits"] = [w for w in u["waits"] if w["counter"] != c]
    renumber(p)


def cover_drop_writer(p):
    """The last lm_head tile is gone: logits' last columns are never written."""
    drop_task(p, tiles_of(p, "lm_head")[-1])


def cover_shrink_tile(p):
    """A q_proj tile writes half its columns: its readers read unwritten ones."""
    t = tiles_of(p, "L0.q_proj")[-1]
    t["params"]["N_tile"] //= 2


def cover_drop_append(p):
    """L0's k append is gone: attention reads the step's row of a stale cache."""
    drop_task(p, by_label(p, "L0.k_append"))


# ---- weight-only quantized tiles (a program through -quantize) ------------------

def quant_tiles(p, prefix):
    ts = [t for t in p["tasks"] if t["label"].startswith(prefix)
          and t["params"].get("qdtype") in (6, 7)]
    if not ts:
        sys.exit(f"amk-mutate: no quantized tile labelled {prefix}*")
    return ts


def quant_scales_shape(p):
    """The scales of L0.q_proj have one group too many."""
    s = buffer_by_id(p, quant_tiles(p, "L0.q_proj")[0]["inputs"][2])
    s["shape"] = [s["shape"][0], s["shape"][1] + 1]


def quant_group(p):
    """L0.down_proj's tiles say group 64, but its scales were made for 128."""
    for t in quant_tiles(p, "L0.down_proj"):
        t["params"]["group"] = 64


def quant_qdtype_mismatch(p):
    """A tile of int8 weights claims int4 (qdtype 7)."""
    quant_tiles(p, "L0.q_proj")[0]["params"]["qdtype"] = 7


def quant_qdtype_unknown(p):
    """qdtype 5 (I32) is no weight-only format."""
    quant_tiles(p, "L0.q_proj")[0]["params"]["qdtype"] = 5


def quant_no_scales(p):
    """A quantized tile without its scales input."""
    t = quant_tiles(p, "L0.q_proj")[0]
    t["inputs"] = t["inputs"][:2]


def quant_scales_dtype(p):
    """The scales of L0.q_proj are i8."""
    buffer_by_id(p, quant_tiles(p, "L0.q_proj")[0]["inputs"][2])["dtype"] = "I8"


def quant_fused(p):
    """A plain quantized tile [x, qW, scales] claims the norm pattern (no g)."""
    quant_tiles(p, "L0.q_proj")[0]["params"]["flags"] = 1 << 16


def fused_tile(p, prefix, pattern):
    for t in p["tasks"]:
        if t["label"].startswith(prefix) and \
                t["params"].get("flags", 0) >> 16 == pattern:
            return t
    sys.exit(f"amk-mutate: no tile labelled {prefix}* of pattern {pattern}")


def quant_pattern_attention(p):
    """An attention_rope tile of a fused program claims int8 weights."""
    fused_tile(p, "L0.attention", 7)["params"]["qdtype"] = 6


def quant_norm_weight(p):
    """A quantized norm tile's g (input 3) is its [128, 1] scales."""
    t = fused_tile(p, "L0.q_proj", 1)
    t["inputs"][3] = t["inputs"][2]


def quant_residual(p):
    """A quantized residual tile's r (input 3) is the 128-wide qkv vector."""
    qkv = fused_tile(p, "L0.q_proj", 1)["outputs"][0]
    fused_tile(p, "L0.o_proj", 2)["inputs"][3] = qkv


def quant_operand_order(p):
    """A quantized norm tile reads g before its scales: [x, qW, g, scales]."""
    t = fused_tile(p, "L0.q_proj", 1)
    t["inputs"][2], t["inputs"][3] = t["inputs"][3], t["inputs"][2]


def quant_fused_arity(p):
    """A quantized silu_residual tile without its residual: [gu, qW, scales]."""
    t = fused_tile(p, "L0.down_proj", 4)
    t["inputs"] = t["inputs"][:3]


def quant_stacked_scales(p):
    """The stacked gate|up scales keep the rows of gate's alone."""
    s = buffer_by_id(p, fused_tile(p, "L0.gate_up_proj", 1)["inputs"][2])
    s["shape"] = [s["shape"][0] // 2, s["shape"][1]]


def quant_packed_width(p):
    """int4 weights as u8 bytes [N, K]: a row takes ceil(K/2) bytes."""
    buffer_by_id(p, quant_tiles(p, "L0.q_proj")[0]["inputs"][1])["dtype"] = "U8"


MUTATIONS = {
    "waw-overlap": waw_overlap,
    "waw-unordered": waw_unordered,
    "waw-ordered": waw_ordered,
    "pages-alias": pages_alias,
    "pages-ordered": pages_ordered,
    "pages-missing-buffer": pages_missing_buffer,
    "onchip-across-sms": onchip_across_sms,
    "onchip-unassigned": onchip_unassigned,
    "sm-queue-order": sm_queue_order,
    "sm-out-of-range": sm_out_of_range,
    "ids-not-positions": ids_not_positions,
    "write-read-only": write_read_only,
    "k-mismatch": k_mismatch,
    "tile-overflow": tile_overflow,
    "zero-k": zero_k,
    "kv-pos-out-of-range": kv_pos_out_of_range,
    "kv-window-overflow": kv_window_overflow,
    "kv-len-zero": kv_len_zero,
    "heads-not-divisible": heads_not_divisible,
    "head-dim-mismatch": head_dim_mismatch,
    "hidden-mismatch": hidden_mismatch,
    "norm-rows": norm_rows,
    "norm-flags": norm_flags,
    "norm-plus-one": norm_plus_one,
    "gelu-flags": gelu_flags,
    "rope-odd-head-dim": rope_odd_head_dim,
    "shape-float": shape_float,
    "shape-zero": shape_zero,
    "pattern-unknown": pattern_unknown,
    "pattern-inputs": pattern_inputs,
    "pattern-norm-weight": pattern_norm_weight,
    "pattern-residual-size": pattern_residual_size,
    "pattern-gu-shape": pattern_gu_shape,
    "pattern-qkv-width": pattern_qkv_width,
    "pattern-inv-freq": pattern_inv_freq,
    "pattern-rope-odd": pattern_rope_odd,
    "pattern-rope-cache": pattern_rope_cache,
    "pattern-rope-heads": pattern_rope_heads,
    "pattern-rope-pos": pattern_rope_pos,
    "pattern-perhead-rope-tile": pattern_perhead_rope_tile,
    "pattern-perhead-attn-span": pattern_perhead_attn_span,
    "pattern-missing-param": pattern_missing_param,
    "pattern-attn-heads": pattern_attn_heads,
    "pattern-attn-group": pattern_attn_group,
    "pattern-attn-window": pattern_attn_window,
    "pattern-attn-divisible": pattern_attn_divisible,
    "pattern-attn-cache": pattern_attn_cache,
    "pattern-attn-query": pattern_attn_query,
    "pattern-attn-partial": pattern_attn_partial,
    "fresh-at-pos3": fresh_at_pos3,
    "fresh-no-flag": fresh_no_flag,
    "fresh-no-qkv-wait": fresh_no_qkv_wait,
    "fresh-rope-row": fresh_rope_row,
    "fresh-window": fresh_window,
    "fresh-on-attention": fresh_on_attention,
    "pattern-comb-inputs": pattern_comb_inputs,
    "pattern-comb-arity": pattern_comb_arity,
    "pattern-comb-k": pattern_comb_k,
    "pattern-comb-partial": pattern_comb_partial,
    "pattern-comb-weight": pattern_comb_weight,
    "pattern-comb-residual": pattern_comb_residual,
    "pattern-comb-missing-param": pattern_comb_missing_param,
    "pattern-comb-tile": pattern_comb_tile,
    "race-comb-partial": race_comb_partial,
    "cover-comb-partial": cover_comb_partial,
    "cover-drop-writer": cover_drop_writer,
    "cover-shrink-tile": cover_shrink_tile,
    "cover-drop-append": cover_drop_append,
    "quant-scales-shape": quant_scales_shape,
    "quant-group": quant_group,
    "quant-qdtype-mismatch": quant_qdtype_mismatch,
    "quant-qdtype-unknown": quant_qdtype_unknown,
    "quant-no-scales": quant_no_scales,
    "quant-scales-dtype": quant_scales_dtype,
    "quant-fused": quant_fused,
    "quant-pattern-attention": quant_pattern_attention,
    "quant-norm-weight": quant_norm_weight,
    "quant-residual": quant_residual,
    "quant-operand-order": quant_operand_order,
    "quant-fused-arity": quant_fused_arity,
    "quant-stacked-scales": quant_stacked_scales,
    "quant-packed-width": quant_packed_width,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", nargs="?")
    ap.add_argument("input", nargs="?")
    ap.add_argument("-o", "--output")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        for name, fn in MUTATIONS.items():
            print(f"{name:22} {(fn.__doc__ or '').splitlines()[0] if fn.__doc__ else ''}")
        return 0
    if args.kind not in MUTATIONS or not args.input:
        ap.error(f"KIND must be one of: {', '.join(MUTATIONS)}")
    with open(args.input, encoding="utf-8") as f:
        prog = json.load(f)
    MUTATIONS[args.kind](prog)
    text = json.dumps(prog, indent=2)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
