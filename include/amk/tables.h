/* The single source of truth for every enumeration of the IR.
 *
 * Each table is an X-macro: the IR, the text printer and parser, the JSON
 * reader and writer, the verifier, the validator and the device ABI all expand
 * these lists, so a code, a name or a cap can never drift between them.
 * Codes are the reference's canonical ABI codes; extend by appending.
 */
#ifndef AMK_TABLES_H
#define AMK_TABLES_H

#define AMK_IR_VERSION "0.2.0"
#define AMK_ABI_VERSION "0.2"
#define AMK_IR_VERSION_MAJOR 0
#define AMK_ABI_VERSION_MAJOR 0
#define AMK_ABI_VERSION_MINOR 2

/* ABI capacities (the device instruction has fixed-size arrays). */
#define AMK_MAX_INPUTS 8
#define AMK_MAX_OUTPUTS 4
#define AMK_MAX_WAITS 8
#define AMK_MAX_RANK 4

/* X(NAME, code, text_name, bits) */
#define AMK_DTYPES(X)                                                          \
  X(F32, 0, "f32", 32)                                                         \
  X(F16, 1, "f16", 16)                                                         \
  X(BF16, 2, "bf16", 16)                                                       \
  X(F8E4M3, 3, "f8e4m3", 8)                                                    \
  X(F8E5M2, 4, "f8e5m2", 8)                                                    \
  X(I32, 5, "i32", 32)                                                         \
  X(I8, 6, "i8", 8)                                                            \
  X(I4, 7, "i4", 4)                                                            \
  X(U8, 8, "u8", 8)                                                            \
  X(BOOL, 9, "bool", 8)

/* X(NAME, code, text_name, on_chip) */
#define AMK_MEMSPACES(X)                                                       \
  X(HBM, 0, "hbm", 0)                                                          \
  X(GLOBAL_SCRATCH, 1, "global_scratch", 0)                                    \
  X(SMEM, 2, "smem", 1)                                                        \
  X(REGISTER, 3, "register", 1)

/* X(NAME, code, text_name, read_only) — read-only kinds never need a writer. */
#define AMK_BUFFER_KINDS(X)                                                    \
  X(WEIGHT, 0, "weight", 1)                                                    \
  X(ACTIVATION, 1, "activation", 0)                                            \
  X(KV_CACHE, 2, "kv_cache", 0)                                                \
  X(IO_INPUT, 3, "io_input", 1)                                                \
  X(IO_OUTPUT, 4, "io_output", 0)                                              \
  X(CONST, 5, "const", 1)

/* Marshalled parameter fields, in amk_params_t order.
 * X(name, type) with type 'i' (int32) or 'f' (float). */
#define AMK_PARAMS(X)                                                          \
  X(K, 'i')                                                                    \
  X(N, 'i')                                                                    \
  X(M, 'i')                                                                    \
  X(N_tile, 'i')                                                               \
  X(M_tile, 'i')                                                               \
  X(n_off, 'i')                                                                \
  X(m_off, 'i')                                                                \
  X(hidden, 'i')                                                               \
  X(vocab, 'i')                                                                \
  X(head_dim, 'i')                                                             \
  X(n_heads, 'i')                                                              \
  X(n_kv_heads, 'i')                                                           \
  X(kv_start, 'i')                                                             \
  X(kv_len, 'i')                                                               \
  X(pos, 'i')                                                                  \
  X(qdtype, 'i')                                                               \
  X(flags, 'i')                                                                \
  X(group, 'i')                                                                \
  X(dim, 'i')                                                                  \
  X(eps, 'f')                                                                  \
  X(scale, 'f')                                                                \
  X(theta, 'f')

/* Bit of each param in a required-params mask. `recipe` is the one required
 * param that does not marshal (FUSED interprets it on the host). */
#define AMK_PARAM_BIT(name) (1u << AMK_PARAM_##name)
#define AMK_REQ_RECIPE (1u << 31)

/* X(NAME, code, text_name, min_inputs, max_inputs (-1 variadic), n_outputs,
 *   required-param mask) */
#define AMK_OPS(X)                                                             \
  X(NOP, 0, "nop", 0, 0, 0, 0)                                                 \
  X(COPY, 1, "copy", 1, 1, 1, 0)                                               \
  X(EMBED, 2, "embed", 2, 2, 1, AMK_PARAM_BIT(hidden))                         \
  X(RMSNORM, 3, "rmsnorm", 2, 2, 1,                                            \
    AMK_PARAM_BIT(eps) | AMK_PARAM_BIT(hidden))                                \
  X(LAYERNORM, 4, "layernorm", 2, 3, 1,                                        \
    AMK_PARAM_BIT(eps) | AMK_PARAM_BIT(hidden))                                \
  X(GEMV_TILE, 5, "gemv_tile", 2, 3, 1,                                        \
    AMK_PARAM_BIT(K) | AMK_PARAM_BIT(N_tile) | AMK_PARAM_BIT(n_off))           \
  X(GEMM_TILE, 6, "gemm_tile", 2, 3, 1,                                        \
    AMK_PARAM_BIT(M_tile) | AMK_PARAM_BIT(K) | AMK_PARAM_BIT(N_tile) |         \
        AMK_PARAM_BIT(n_off))                                                  \
  X(ATTENTION_TILE, 7, "attention_tile", 3, 4, 1,                              \
    AMK_PARAM_BIT(head_dim) | AMK_PARAM_BIT(kv_start) |                        \
        AMK_PARAM_BIT(kv_len) | AMK_PARAM_BIT(scale) |                         \
        AMK_PARAM_BIT(n_heads) | AMK_PARAM_BIT(n_kv_heads))                    \
  X(ROPE, 8, "rope", 2, 2, 1, AMK_PARAM_BIT(head_dim) | AMK_PARAM_BIT(theta))  \
  X(SILU_MUL, 9, "silu_mul", 2, 2, 1, 0)                                       \
  X(GELU, 10, "gelu", 1, 1, 1, 0)                                              \
  X(ADD, 11, "add", 2, 2, 1, 0)                                                \
  X(MUL, 12, "mul", 1, 2, 1, 0)                                                \
  X(DEQUANT, 13, "dequant", 2, 3, 1,                                           \
    AMK_PARAM_BIT(qdtype) | AMK_PARAM_BIT(group))                              \
  X(SOFTMAX, 14, "softmax", 1, 1, 1, 0)                                        \
  X(ALLREDUCE_SHARD, 15, "allreduce_shard", 1, 8, 1, 0)                        \
  X(KV_APPEND, 16, "kv_append", 2, 2, 1, AMK_PARAM_BIT(pos))                   \
  X(SAMPLE_ARGMAX, 17, "sample_argmax", 1, 1, 1, 0)                            \
  X(ATTENTION_COMBINE, 18, "attention_combine", 2, 8, 1, 0)                    \
  X(FUSED, 19, "fused", 1, -1, 1, AMK_REQ_RECIPE)

/* Schedule-config policies. X(NAME, text_name) */
#define AMK_PAGE_POLICIES(X)                                                   \
  X(LINEAR, "linear")                                                          \
  X(GRAPH_COLOR, "graph_color")                                                \
  X(NONE, "none")

#define AMK_SM_POLICIES(X)                                                     \
  X(LOAD_BALANCE, "load_balance")                                              \
  X(ROUND_ROBIN, "round_robin")                                                \
  X(EXPLICIT, "explicit")

/* GpuTarget fields in JSON key order.
 * X(field, json_kind) with kind STR, INT, FLOAT or BOOL. */
#define AMK_TARGET_FIELDS(X)                                                   \
  X(name, STR)                                                                 \
  X(sm_arch, INT)                                                              \
  X(num_sms, INT)                                                              \
  X(smem_bytes_per_sm, INT)                                                    \
  X(smem_bytes_per_block_optin, INT)                                           \
  X(regs_per_sm, INT)                                                          \
  X(max_threads_per_sm, INT)                                                   \
  X(max_regs_per_thread, INT)                                                  \
  X(l2_bytes, INT)                                                             \
  X(hbm_bytes, INT)                                                            \
  X(hbm_bandwidth_gbs, FLOAT)                                                  \
  X(fp16_tflops, FLOAT)                                                        \
  X(clock_ghz, FLOAT)                                                          \
  X(supports_cooperative, BOOL)                                                \
  X(wddm_tdr, BOOL)                                                            \
  X(measured_bw_gbs, FLOAT)                                                    \
  X(note, STR)

/* Number of leading target fields the JSON reader requires (name through
 * fp16_tflops); the rest have defaults. */
#define AMK_TARGET_REQUIRED_FIELDS 12

/* Built-in targets. X(name, sm_arch, num_sms, smem_per_sm, smem_optin,
 * max_threads_per_sm, l2_bytes, hbm_bytes, hbm_gbs, tflops, clock_ghz,
 * wddm_tdr, measured_gbs, note). regs_per_sm is 65536, max_regs_per_thread
 * 255 and supports_cooperative true for all of them. */
#define AMK_BUILTIN_TARGETS(X)                                                 \
  X("h200", 90, 132, 233472, 232448, 2048, 62914560, 151397597184LL, 4800.0,  \
    989.0, 1.98, 0, 4190.0,                                                    \
    "Hopper SXM, 141 GB HBM3e; measured_bw_gbs is the read bandwidth "        \
    "measured on the lent H200")                                               \
  X("h100", 90, 132, 233472, 232448, 2048, 52428800, 85899345920LL, 3350.0,   \
    989.0, 1.98, 0, 3089.0, "Hopper SXM5, HBM3")                               \
  X("b200", 100, 148, 233472, 232448, 2048, 52428800, 206158430208LL, 8000.0, \
    2250.0, 1.86, 0, 0.0, "Blackwell, spec figures only")                      \
  X("a100", 80, 108, 167936, 166912, 2048, 41943040, 42949672960LL, 1555.0,   \
    312.0, 1.41, 0, 1382.0, "Ampere")                                          \
  X("rtx5090", 120, 82, 102400, 101376, 2048, 67108864, 25769803776LL, 896.0, \
    210.0, 1.597, 1, 731.0, "Blackwell desktop, WDDM watchdog")                \
  X("l4", 89, 58, 102400, 101376, 1536, 50331648, 25769803776LL, 300.0, 242.0,\
    2.04, 0, 0.0, "Ada")                                                       \
  X("t4", 75, 40, 65536, 65536, 1024, 4194304, 17179869184LL, 320.0, 65.0,    \
    1.59, 0, 0.0, "Turing")                                                    \
  X("a10g", 86, 80, 102400, 101376, 1536, 6291456, 25769803776LL, 600.0,      \
    125.0, 1.71, 0, 0.0, "Ampere")                                             \
  X("l40s", 89, 142, 102400, 101376, 1536, 100663296, 51539607552LL, 864.0,   \
    362.0, 2.52, 0, 0.0, "Ada")

/* Low flag bits (flags param) of ops other than GEMV_TILE's patterns: bit 0
 * causal and bit 1 partial write (ATTENTION_TILE, the reference's), bit 2
 * the variant of RMSNORM and GELU below (docs/LangRef.md). */
#define AMK_FLAG_NORM_PLUS_ONE 4 /* RMSNORM: y = x * rsqrt(mean(x^2) + eps) * (1 + w) */
#define AMK_FLAG_GELU_TANH 4     /* GELU: the tanh approximation */
/* GEMV_TILE pattern attention_rope, flags bit 2: the step's own key and value
 * (row pos) come from qkv, rotated and rounded as rope_kv stores them; the
 * cache is read only below pos, so the tile waits on qkv, not on rope_kv. */
#define AMK_FLAG_KV_FROM_QKV 4
/* GEMV_TILE pattern mlp, flags bit 0: no tile adds x (the down projection's
 * share on a tensor-parallel rank other than 0: its partial goes into the
 * all-reduce, which takes the residual once, from rank 0's tiles). */
#define AMK_FLAG_MLP_NO_RESIDUAL 1

/* Fused GEMV patterns. A tiled fused task stays a GEMV_TILE, so the
 * reference validator still sees a tiled writer with the column footprint
 * [n_off, n_off + N_tile), and names its pattern in flags bits 16-31:
 * flags = (pattern << AMK_PATTERN_SHIFT) | the low flag bits.
 * X(NAME, id, text_name, inputs, what the tile computes); docs/Fusion.md has
 * the exact semantics. A pattern reads as many inputs as GEMV_TILE's row in
 * AMK_OPS allows, except combine_residual and the weight-only quantized
 * forms of norm, residual and silu_residual, which read their scales at
 * input 2 and the pattern's operand at input 3, and mlp, which reads four
 * (amk_op_max_inputs), and attention_o, which reads five. A quantized
 * combine_residual tile reads p0, qW, scales, r, p1.. */
#define AMK_PATTERN_SHIFT 16
/* The input where a combine_residual tile's partials after p0 start: after
 * W and r, or after qW, scales and r when its weights are quantized. */
#define AMK_COMBINE_MORE_PARTIALS(quantized) ((quantized) ? 4u : 3u)
#define AMK_GEMV_PATTERNS(X)                                                   \
  X(PLAIN, 0, "plain", "x, W", "out[cols] = x @ W[cols]^T")                   \
  X(NORM, 1, "norm", "x, W, g",                                               \
    "out[cols] = rmsnorm(x, g) @ W[cols]^T; each tile recomputes the norm")    \
  X(RESIDUAL, 2, "residual", "x, W, r", "out[cols] = r[cols] + x @ W[cols]^T") \
  X(SILU, 3, "silu", "gu, W",                                                 \
    "out[cols] = (silu(gu[:K]) * gu[K:2K]) @ W[cols]^T")                       \
  X(SILU_RESIDUAL, 4, "silu_residual", "gu, W, r",                            \
    "out[cols] = r[cols] + (silu(gu[:K]) * gu[K:2K]) @ W[cols]^T")             \
  X(ROPE_KV, 5, "rope_kv", "qkv, inv_freq, pos",                            \
    "rotate k of KV head n_off at the step position and append k, v to row "  \
    "pos of the [max_seq, 2, n_kv * head_dim] or per-head [max_seq, 2, "      \
    "head_dim] cache")                                                         \
  X(ATTENTION, 6, "attention", "q, k_cache, v_cache",                         \
    "attention for query heads [n_off, n_off + N_tile) (one KV head's GQA "   \
    "group) over [max_seq, n_kv, head_dim] caches")                            \
  X(ATTENTION_ROPE, 7, "attention_rope", "qkv, inv_freq, kv_cache",           \
    "rotate the group's q heads, then attend over the combined "              \
    "[max_seq, 2, n_kv * head_dim] or the group's per-head cache (flags "     \
    "bit 2: row pos from qkv, the cache below pos)")                           \
  X(COMBINE_RESIDUAL, 8, "combine_residual", "p0, W, r, p1..",               \
    "out[cols] = r[cols] + combine(p0..p{P-1}) @ W[cols]^T; each tile "       \
    "recombines the P split-KV partials [n_heads, head_dim + 2] itself")      \
  X(MLP, 9, "mlp", "x, Wgu, g, Wdt",                                          \
    "act = silu(gate) * up of rmsnorm(x, g) for intermediate columns "        \
    "[n_off, n_off + N_tile); out[:] += Wdt[cols, :]^T @ act (+ x for the "   \
    "tile at n_off 0, unless flags bit 0): a split-K down projection (its "   \
    "weight transposed, [I, K]) accumulated into an f32 buffer every step "   \
    "starts at zero")                                                         \
  X(ATTENTION_O, 10, "attention_o", "qkv, Wot, inv_freq, kv_cache, x",        \
    "attention_rope for the one query head holding attention columns "        \
    "[n_off, n_off + N_tile), then out[:] += Wot[cols, :]^T @ those "         \
    "columns (+ x for the tile at n_off 0): a split-K o projection (its "     \
    "weight transposed, [n_heads * head_dim, hidden]) accumulated into an "   \
    "f32 buffer every step starts at zero")

#endif
