/* Fused GEMV patterns (docs/Fusion.md): a GEMV_TILE whose flags bits 16-31
 * name a pattern (norm, residual, silu, silu_residual, rope_kv, attention,
 * attention_rope, combine_residual, mlp, attention_o), and
 * amk_kernel_GEMV_TILE, which picks the plain tile (gemv.c) or one of them.
 *
 * Each pattern runs the kernels of its unfused steps (RMSNORM, SILU_MUL,
 * the plain GEMV, ADD over the tile's columns, ROPE, the shared attention
 * loop, ATTENTION_COMBINE) over transient scratch whose dtype is that of the unfused
 * intermediate buffer: the program dtype, i.e. the output's dtype (the
 * qkv vector's for rotated q and k and for attention_o's attention output;
 * x's for mlp; both of those write an f32 accumulator). So a fused program
 * gives exactly the bits of its unfused form, except the accumulating
 * patterns' split-K projections (mlp's down, attention_o's o), which add
 * their tile's share into the accumulator in fp32 (the order of the tiles'
 * sums is the engine's). Every shape, head range and position is checked
 * before the first write to the output.
 *
 * norm, residual, silu and silu_residual also take weight-only quantized
 * weights (params qdtype, group): inputs [x, qW, scales(, operand)], the
 * scales at input 2 and the pattern's operand after them at input 3. Their
 * GEMV step is then the quantized plain tile (DEQUANT, then the fp GEMV).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "inst_internal.h"

/* ---- plumbing ----------------------------------------------------------- */

static const char *pattern_text(int64_t pattern) {
  const char *name = amk_gemv_pattern_name(pattern);
  return name ? name : "?";
}

/* A zeroed scratch tensor; *view->data must be freed. */
static int scratch(const AmkInstCall *call, AmkDType dtype, uint32_t rank,
                   const int64_t *shape, AmkTensorView *view) {
  *view = amk_tensor_view(NULL, dtype, rank, shape);
  int64_t nbytes = view->numel < 0 ? -1 : inst_nbytes(view);
  if (nbytes < 0)
    return inst_fail(call, AMK_INST_ERR_SHAPE, "no scratch of that shape");
  view->data = calloc((size_t)(nbytes ? nbytes : 1), 1);
  if (!view->data)
    return inst_fail(call, AMK_INST_ERR_NOMEM, "out of memory");
  return AMK_INST_OK;
}

/* `count` elements of v from element `first` (byte-sized dtypes only; the
 * caller checked the dtype is numeric and the range inside v). */
static AmkTensorView slice(const AmkTensorView *v, int64_t first, int64_t count) {
  int64_t shape[1] = {count};
  char *base = (char *)v->data + amk_dtype_nbytes(v->dtype, first);
  return amk_tensor_view(base, v->dtype, 1, shape);
}

/* Run one unfused step's kernel; its error becomes "<pattern>: <step
 * error>" of this call. The step sees no extra (no recipe, no position, no
 * frequencies): everything it needs is in its inputs and params. */
static int step(const AmkInstCall *call, int64_t pattern, AmkOp op,
                AmkKernelFn fn, const AmkInstParams *p, const AmkTensorView *in,
                uint32_t n_in, AmkTensorView *out) {
  static const AmkInstExtra no_extra;
  char detail[256] = "";
  AmkInstCall sub = {.op = op,
                     .p = p,
                     .in = in,
                     .n_in = n_in,
                     .out = out,
                     .n_out = 1,
                     .extra = &no_extra,
                     .err = detail,
                     .err_len = sizeof detail};
  int rc = fn(&sub);
  if (rc)
    return inst_fail(call, rc, "%s: %s", pattern_text(pattern), detail);
  return AMK_INST_OK;
}

static int require_inputs(const AmkInstCall *call, int64_t pattern,
                          uint32_t want, const char *names) {
  if (call->n_in == want)
    return AMK_INST_OK;
  return inst_fail(call, AMK_INST_ERR_ARITY, "%s takes %u inputs (%s), got %u",
                   pattern_text(pattern), want, names, call->n_in);
}

/* Whether the call names a weight-only quantized format (any qdtype param:
 * the plain tile refuses a value it does not know). */
static bool quantized(const AmkInstCall *call) {
  return amk_inst_param_has(call->p, AMK_PARAM_qdtype);
}

/* The inputs before the pattern's operand: x and W, or x, qW and scales. */
static uint32_t weight_inputs(const AmkInstCall *call) {
  return quantized(call) ? 3 : 2;
}

/* mlp and attention_o take fp weights only (their inputs after W hold
 * operands, no scales). */
static int require_fp_weights(const AmkInstCall *call, int64_t pattern) {
  if (quantized(call))
    return inst_fail(call, AMK_INST_ERR_PARAM,
                     "%s takes fp weights, not qdtype %d", pattern_text(pattern),
                     (int)inst_int_or(call, AMK_PARAM_qdtype, 0));
  return AMK_INST_OK;
}

/* The plain GEMV of (x, W), or of (x, qW, scales), with this call's params,
 * into *out. */
static int gemv_step(const AmkInstCall *call, int64_t pattern,
                     const AmkTensorView *x, AmkTensorView *out) {
  AmkTensorView in[3] = {*x, call->in[1], *x};
  if (quantized(call))
    in[2] = call->in[2];
  return step(call, pattern, AMK_OP_GEMV_TILE, inst_gemv_plain, call->p, in,
              weight_inputs(call), out);
}

/* A GEMV-shaped pattern's inputs: its fp form `names` ("x, W, g") with
 * `operands` operands after W, or the quantized form with the scales
 * before them. */
static int require_gemv_inputs(const AmkInstCall *call, int64_t pattern,
                               uint32_t operands, const char *names,
                               const char *quantized_names) {
  return require_inputs(call, pattern, weight_inputs(call) + operands,
                        quantized(call) ? quantized_names : names);
}

/* The product (x, W) for the tile's columns, then + r over those columns
 * (the unfused GEMV output rounded to its buffer's dtype, then the ADD). */
static int gemv_residual(const AmkInstCall *call, int64_t pattern,
                         const AmkTensorView *x, const AmkTensorView *r) {
  AmkTensorView *out = &call->out[0];
  AmkTensorView y;
  int rc = scratch(call, out->dtype, out->rank, out->shape, &y);
  if (rc)
    return rc;
  AmkTensorView add_in[2] = {y, *r};
  if (!(rc = gemv_step(call, pattern, x, &y)))
    rc = step(call, pattern, AMK_OP_ADD, amk_kernel_ADD, call->p, add_in, 2, out);
  free(y.data);
  return rc;
}

/* ---- norm, residual ----------------------------------------------------- */

/* x, W, g: out[c] = rmsnorm(x, g, eps) . W[c]. K is the width of x. */
static int run_norm(const AmkInstCall *call, int64_t pattern) {
  int rc;
  if ((rc = require_gemv_inputs(call, pattern, 1, "x, W, g", "x, qW, scales, g")) ||
      (rc = inst_require(call, AMK_PARAM_K)) ||
      (rc = inst_require(call, AMK_PARAM_eps)) ||
      (rc = inst_require_numeric(call, &call->out[0], "output")))
    return rc;
  const AmkTensorView *x = &call->in[0];
  AmkInstParams norm_params = {0};
  norm_params.hidden.i = call->p->K.i;
  norm_params.eps = call->p->eps;
  norm_params.present = AMK_PARAM_BIT(hidden) | AMK_PARAM_BIT(eps);
  AmkTensorView xn;
  if ((rc = scratch(call, call->out[0].dtype, x->rank, x->shape, &xn)))
    return rc;
  AmkTensorView norm_in[2] = {*x, call->in[weight_inputs(call)]};
  if (!(rc = step(call, pattern, AMK_OP_RMSNORM, amk_kernel_RMSNORM,
                  &norm_params, norm_in, 2, &xn)))
    rc = gemv_step(call, pattern, &xn, &call->out[0]);
  free(xn.data);
  return rc;
}

/* x, W, r: out[c] = r[c] + x . W[c]. */
static int run_residual(const AmkInstCall *call, int64_t pattern) {
  int rc;
  if ((rc = require_gemv_inputs(call, pattern, 1, "x, W, r", "x, qW, scales, r")) ||
      (rc = inst_require_numeric(call, &call->out[0], "output")))
    return rc;
  return gemv_residual(call, pattern, &call->in[0], &call->in[weight_inputs(call)]);
}

/* ---- silu, silu_residual ------------------------------------------------ */

/* gu, W(, r): act = silu(gu[0, :]) * gu[1, :] over the whole row (every
 * tile needs all of it), then the GEMV (and the residual add). */
static int run_silu(const AmkInstCall *call, int64_t pattern, bool residual) {
  int rc;
  if ((rc = require_gemv_inputs(call, pattern, residual ? 1 : 0,
                                residual ? "gu, W, r" : "gu, W",
                                residual ? "gu, qW, scales, r" : "gu, qW, scales")) ||
      (rc = inst_require(call, AMK_PARAM_K)) ||
      (rc = inst_require_numeric(call, &call->in[0], "gu")) ||
      (rc = inst_require_numeric(call, &call->out[0], "output")))
    return rc;
  const AmkTensorView *gu = &call->in[0];
  int64_t inter = call->p->K.i;
  if (inter <= 0 || inst_width(gu) != inter || gu->numel != 2 * inter)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s: gu has %" PRId64 " elements of width %" PRId64
                     ", want [2, K] with K = %" PRId64,
                     pattern_text(pattern), gu->numel, inst_width(gu), inter);
  int64_t act_shape[2] = {1, inter};
  AmkTensorView act;
  if ((rc = scratch(call, call->out[0].dtype, 2, act_shape, &act)))
    return rc;
  AmkTensorView halves[2] = {slice(gu, 0, inter), slice(gu, inter, inter)};
  AmkInstParams none = {0};
  rc = step(call, pattern, AMK_OP_SILU_MUL, amk_kernel_SILU_MUL, &none, halves,
            2, &act);
  if (!rc)
    rc = residual ? gemv_residual(call, pattern, &act, &call->in[weight_inputs(call)])
                  : gemv_step(call, pattern, &act, &call->out[0]);
  free(act.data);
  return rc;
}

/* ---- combine_residual ----------------------------------------------------- */

/* p0, W, r, p1..p{P-1} (or p0, qW, scales, r, p1..): x =
 * ATTENTION_COMBINE(p0, .., p{P-1}) (the same kernel, so the same float ops
 * in the same order) into scratch of the output's dtype, the unfused
 * attention output's; then the residual tile. Every tile recombines all
 * heads: each column reads the whole of x. */
static int run_combine_residual(const AmkInstCall *call, int64_t pattern) {
  int rc;
  uint32_t more = AMK_COMBINE_MORE_PARTIALS(quantized(call)); /* p1.. start here */
  if (call->n_in < more || call->n_in > AMK_MAX_INPUTS)
    return inst_fail(call, AMK_INST_ERR_ARITY, "%s takes %u to %d inputs (%s), got %u",
                     pattern_text(pattern), more, AMK_MAX_INPUTS,
                     quantized(call) ? "p0, qW, scales, r, p1.."
                                     : amk_gemv_pattern_inputs(pattern),
                     call->n_in);
  static const AmkParamField required[] = {AMK_PARAM_K, AMK_PARAM_head_dim,
                                           AMK_PARAM_n_heads};
  if ((rc = inst_require_all(call, required, sizeof required / sizeof required[0])) ||
      (rc = inst_require_numeric(call, &call->out[0], "output")))
    return rc;
  int64_t head_dim = call->p->head_dim.i, n_heads = call->p->n_heads.i;
  if (head_dim <= 0 || n_heads <= 0 || call->p->K.i != head_dim * n_heads)
    return inst_fail(call, AMK_INST_ERR_PARAM,
                     "%s: K = %d must be n_heads x head_dim = %" PRId64 " x %" PRId64
                     " (both positive)",
                     pattern_text(pattern), (int)call->p->K.i, n_heads, head_dim);
  AmkTensorView partials[AMK_MAX_INPUTS];
  uint32_t n_partials = 0;
  partials[n_partials++] = call->in[0];
  for (uint32_t i = more; i < call->n_in; i++)
    partials[n_partials++] = call->in[i];
  AmkInstParams combine = {0};
  combine.head_dim = call->p->head_dim;
  combine.n_heads = call->p->n_heads;
  combine.present = AMK_PARAM_BIT(head_dim) | AMK_PARAM_BIT(n_heads);
  int64_t x_shape[2] = {1, head_dim * n_heads};
  AmkTensorView x;
  if ((rc = scratch(call, call->out[0].dtype, 2, x_shape, &x)))
    return rc;
  if (!(rc = step(call, pattern, AMK_OP_ATTENTION_COMBINE, amk_kernel_ATTENTION_COMBINE,
                  &combine, partials, n_partials, &x)))
    rc = gemv_residual(call, pattern, &x, &call->in[more - 1]);
  free(x.data);
  return rc;
}

/* ---- rope_kv, attention, attention_rope ----------------------------------- */

typedef struct {
  int64_t head_dim, n_heads, n_kv, first, count; /* heads [first, first+count) */
} HeadTile;

/* head_dim (positive, even), n_heads and n_kv_heads of *t. */
static int check_head_counts(const AmkInstCall *call, int64_t pattern, const HeadTile *t) {
  if (t->head_dim <= 0 || t->head_dim % 2 != 0 || t->n_heads <= 0 ||
      t->n_kv <= 0 || t->n_heads % t->n_kv != 0)
    return inst_fail(call, AMK_INST_ERR_PARAM,
                     "%s: head_dim %" PRId64 " (positive, even), n_heads %" PRId64
                     ", n_kv_heads %" PRId64
                     " (positive, n_kv_heads dividing n_heads)",
                     pattern_text(pattern), t->head_dim, t->n_heads, t->n_kv);
  return AMK_INST_OK;
}

/* head_dim (positive, even), n_heads, n_kv_heads and the tile's heads
 * [n_off, n_off + N_tile) within `limit` (KV heads or query heads). */
static int head_tile(const AmkInstCall *call, int64_t pattern, bool kv_heads,
                     HeadTile *t) {
  static const AmkParamField required[] = {AMK_PARAM_head_dim,
                                           AMK_PARAM_n_heads,
                                           AMK_PARAM_n_kv_heads,
                                           AMK_PARAM_N_tile, AMK_PARAM_n_off};
  int rc = inst_require_all(call, required, sizeof required / sizeof required[0]);
  if (rc)
    return rc;
  const AmkInstParams *p = call->p;
  *t = (HeadTile){.head_dim = p->head_dim.i,
                  .n_heads = p->n_heads.i,
                  .n_kv = p->n_kv_heads.i,
                  .first = p->n_off.i,
                  .count = p->N_tile.i};
  if ((rc = check_head_counts(call, pattern, t)))
    return rc;
  int64_t limit = kv_heads ? t->n_kv : t->n_heads;
  if (t->first < 0 || t->count < 0 || t->first > limit - t->count)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s: heads [%" PRId64 ", %" PRId64 ") are outside the %" PRId64
                     " %s heads",
                     pattern_text(pattern), t->first, t->first + t->count, limit,
                     kv_heads ? "KV" : "query");
  return AMK_INST_OK;
}

/* The fused q|k|v vector holds n_heads + 2 n_kv_heads heads. */
static int check_qkv(const AmkInstCall *call, int64_t pattern,
                     const HeadTile *t, const AmkTensorView *qkv) {
  int rc = inst_require_numeric(call, qkv, "qkv");
  if (rc)
    return rc;
  int64_t want = (t->n_heads + 2 * t->n_kv) * t->head_dim;
  if (qkv->numel != want)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s: qkv has %" PRId64 " elements, want (n_heads + 2 "
                     "n_kv_heads) x head_dim = %" PRId64,
                     pattern_text(pattern), qkv->numel, want);
  return AMK_INST_OK;
}

/* The fused KV cache [max_seq, 2, W] (plane 0 keys, plane 1 values): with
 * W = n_kv_heads * head_dim the combined cache of every KV head, with
 * W = head_dim (and more than one KV head) a per-head cache holding the one
 * KV head the tile works on. */
typedef struct {
  int64_t rows;  /* max_seq */
  int64_t width; /* W: one plane of a row */
  bool per_head;
} KvCache;

static int kv_cache_layout(const AmkInstCall *call, int64_t pattern,
                           const HeadTile *t, const AmkTensorView *cache,
                           KvCache *kc) {
  int rc = inst_require_numeric(call, cache, "kv cache");
  if (rc)
    return rc;
  kc->per_head = t->n_kv > 1 && inst_width(cache) == t->head_dim;
  kc->width = kc->per_head ? t->head_dim : t->n_kv * t->head_dim;
  int64_t row_len = 2 * kc->width;
  if (cache->numel % row_len != 0)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s: the cache's %" PRId64 " elements are not rows of 2 x "
                     "%s = %" PRId64,
                     pattern_text(pattern), cache->numel,
                     kc->per_head ? "head_dim" : "n_kv_heads x head_dim", row_len);
  kc->rows = cache->numel / row_len;
  return AMK_INST_OK;
}

/* The step's position: the caller's (extra), else the `pos` param. Only
 * when neither is given does `fallback` (>= 0) stand in. */
static int step_position(const AmkInstCall *call, int64_t pattern,
                         int64_t fallback, int64_t *pos) {
  if (call->extra->has_position)
    *pos = call->extra->position;
  else if (amk_inst_param_has(call->p, AMK_PARAM_pos))
    *pos = call->p->pos.i;
  else if (fallback >= 0)
    *pos = fallback;
  else
    return inst_fail(call, AMK_INST_ERR_PARAM,
                     "%s needs the step position (the caller's, or param 'pos')",
                     pattern_text(pattern));
  if (*pos < 0 || *pos > INT32_MAX)
    return inst_fail(call, AMK_INST_ERR_INDEX,
                     "%s: position %" PRId64 " is outside [0, 2^31)",
                     pattern_text(pattern), *pos);
  return AMK_INST_OK;
}

/* ROPE of heads [first, first + count) of `x` (a run of whole heads) at
 * position `pos` with the given inverse frequencies, into the same
 * elements of `rotated` (x's dtype, as the unfused ROPE output). */
static int rope_heads(const AmkInstCall *call, int64_t pattern,
                      const HeadTile *t, const AmkTensorView *x,
                      int64_t first, int64_t count, const AmkTensorView *inv_freq,
                      int64_t pos, AmkTensorView *rotated) {
  if (count == 0)
    return AMK_INST_OK;
  int32_t position = (int32_t)pos;
  int64_t one[1] = {1};
  AmkTensorView in[3] = {slice(x, first * t->head_dim, count * t->head_dim),
                         amk_tensor_view(&position, AMK_DTYPE_I32, 1, one),
                         *inv_freq};
  AmkTensorView out = slice(rotated, first * t->head_dim, count * t->head_dim);
  AmkInstParams p = {0};
  p.head_dim.i = (int32_t)t->head_dim;
  p.theta.f = 10000.0f; /* required by ROPE, unused: inv_freq is given */
  p.present = AMK_PARAM_BIT(head_dim) | AMK_PARAM_BIT(theta);
  return step(call, pattern, AMK_OP_ROPE, amk_kernel_ROPE, &p, in, 3, &out);
}

/* What rope_kv stores for KV heads [first, first + count) at position pos:
 * k rotated (rounded to qkv's dtype, as ROPE leaves it) and v, each rounded
 * to dst's dtype, into the cache row of `dst` at element `row` (keys, then
 * values kc->width later), head h at columns (h - base) * head_dim. */
static int store_kv_row(const AmkInstCall *call, int64_t pattern, const HeadTile *t,
                        const KvCache *kc, const AmkTensorView *qkv,
                        const AmkTensorView *inv_freq, int64_t pos, int64_t first,
                        int64_t count, int64_t base, AmkTensorView *dst, int64_t row) {
  int64_t hd = t->head_dim, k_first = t->n_heads * hd, v_first = k_first + t->n_kv * hd;
  int64_t k_shape[1] = {(t->n_heads + 2 * t->n_kv) * hd};
  AmkTensorView k_rot;
  int rc = scratch(call, qkv->dtype, 1, k_shape, &k_rot);
  if (rc)
    return rc;
  /* k heads sit after the n_heads q heads: head index n_heads + h. */
  rc = rope_heads(call, pattern, t, qkv, t->n_heads + first, count, inv_freq, pos, &k_rot);
  for (int64_t i = first * hd; !rc && i < (first + count) * hd; i++) {
    inst_store(dst, row + i - base * hd, inst_load(&k_rot, k_first + i));
    inst_store(dst, row + kc->width + i - base * hd, inst_load(qkv, v_first + i));
  }
  free(k_rot.data);
  return rc;
}

/* qkv, inv_freq, pos -> cache: for KV heads [n_off, n_off + N_tile), k
 * rotated at the step position and v, into row pos of the combined cache
 * (or of KV head n_off's per-head cache, N_tile 1). */
static int run_rope_kv(const AmkInstCall *call, int64_t pattern) {
  int rc;
  HeadTile t;
  KvCache kc;
  int64_t pos = 0;
  const AmkTensorView *qkv = &call->in[0], *positions = &call->in[2];
  AmkTensorView *cache = &call->out[0];
  if ((rc = require_inputs(call, pattern, 3, "qkv, inv_freq, pos")) ||
      (rc = head_tile(call, pattern, true, &t)) ||
      (rc = check_qkv(call, pattern, &t, qkv)) ||
      (rc = inst_require_integer(call, positions, "pos")) ||
      (rc = kv_cache_layout(call, pattern, &t, cache, &kc)))
    return rc;
  if (kc.per_head && t.count > 1)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s: a per-head cache holds one KV head, the tile has %" PRId64,
                     pattern_text(pattern), t.count);
  int64_t given = positions->numel > 0 ? inst_load_int(positions, 0) : -1;
  if ((rc = step_position(call, pattern, given, &pos)))
    return rc;
  if (pos >= kc.rows)
    return inst_fail(call, AMK_INST_ERR_INDEX,
                     "%s: position %" PRId64 " is outside the cache's %" PRId64
                     " rows",
                     pattern_text(pattern), pos, kc.rows);
  /* The per-head cache starts at head n_off. */
  return store_kv_row(call, pattern, &t, &kc, qkv, &call->in[1], pos, t.first, t.count,
                      kc.per_head ? t.first : 0, cache, pos * 2 * kc.width);
}

/* Query heads [n_off, n_off + N_tile) attend; the params as ATTENTION_TILE
 * (whole output, or partial with flags bit 1). */
static int attention_tile(const AmkInstCall *call, int64_t pattern,
                          HeadTile *t, InstAttention *a) {
  int rc;
  if ((rc = head_tile(call, pattern, false, t)) ||
      (rc = inst_attention_params(call, a)) ||
      (rc = inst_attention_check_output(call, a, &call->out[0])))
    return rc;
  return AMK_INST_OK;
}

/* q, k_cache, v_cache ([max_seq, n_kv_heads, head_dim]). */
static int run_attention(const AmkInstCall *call, int64_t pattern) {
  int rc;
  HeadTile t;
  InstAttention a;
  const AmkTensorView *q = &call->in[0], *k = &call->in[1], *v = &call->in[2];
  if ((rc = require_inputs(call, pattern, 3, "q, k_cache, v_cache")) ||
      (rc = attention_tile(call, pattern, &t, &a)) ||
      (rc = inst_require_numeric(call, q, "q")) ||
      (rc = inst_require_numeric(call, k, "k cache")) ||
      (rc = inst_require_numeric(call, v, "v cache")) ||
      (rc = inst_require_same_numel(call, k, "k cache", v, "v cache")))
    return rc;
  if (q->numel != a.n_heads * a.head_dim)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "attention: q has %" PRId64 " elements, want n_heads x "
                     "head_dim = %" PRId64,
                     q->numel, a.n_heads * a.head_dim);
  int64_t row_len = a.n_kv_heads * a.head_dim;
  if (k->numel % row_len != 0)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "attention: the caches' %" PRId64 " elements are not rows "
                     "of n_kv_heads x head_dim = %" PRId64,
                     k->numel, row_len);
  if ((rc = inst_attention_check_window(call, &a, k->numel / row_len)))
    return rc;
  InstKvLayout kv = {.k = k, .v = v, .row_stride = row_len};
  return inst_attend_heads(call, &a, q, &kv, t.first, t.first + t.count,
                           &call->out[0]);
}

/* qkv, inv_freq, kv_cache (combined, or the per-head cache of the tile's
 * KV head): rotate the tile's q heads at the step position (the caller's,
 * else `pos`, else the last row of a whole window), then attend. With flags
 * bit AMK_FLAG_KV_FROM_QKV the window's row pos is the row rope_kv stores
 * this step, built here from qkv (the same rounding), and the window may not
 * reach past it: the cache is read only below pos. */
static int run_attention_rope(const AmkInstCall *call, int64_t pattern) {
  int rc;
  HeadTile t;
  InstAttention a;
  KvCache kc;
  int64_t pos = 0;
  const AmkTensorView *qkv = &call->in[0], *cache = &call->in[2];
  if ((rc = require_inputs(call, pattern, 3, "qkv, inv_freq, kv_cache")) ||
      (rc = attention_tile(call, pattern, &t, &a)) ||
      (rc = check_qkv(call, pattern, &t, qkv)) ||
      (rc = kv_cache_layout(call, pattern, &t, cache, &kc)) ||
      (rc = inst_attention_check_window(call, &a, kc.rows)))
    return rc;
  /* A per-head cache holds KV head g of the tile's (one) GQA group. */
  int64_t group = t.n_heads / t.n_kv, g = t.first / group;
  if (kc.per_head && t.count > 0 && (t.first + t.count - 1) / group != g)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s: query heads [%" PRId64 ", %" PRId64
                     ") span several KV heads but the cache holds one",
                     pattern_text(pattern), t.first, t.first + t.count);
  int64_t last = !a.partial && a.kv_len > 0 ? a.kv_start + a.kv_len - 1 : -1;
  if ((rc = step_position(call, pattern, last, &pos)))
    return rc;
  bool from_qkv = (inst_int_or(call, AMK_PARAM_flags, 0) & AMK_FLAG_KV_FROM_QKV) != 0;
  if (from_qkv && a.kv_len > 0 && a.kv_start + a.kv_len > pos + 1)
    return inst_fail(call, AMK_INST_ERR_INDEX,
                     "%s: window [%" PRId64 ", %" PRId64 ") reaches past the step's row %" PRId64
                     " (flags bit %d takes row pos from qkv and reads the cache below it)",
                     pattern_text(pattern), a.kv_start, a.kv_start + a.kv_len, pos,
                     AMK_FLAG_KV_FROM_QKV / 2);
  int64_t q_shape[1] = {a.n_heads * a.head_dim};
  int64_t row_shape[1] = {2 * kc.width};
  AmkTensorView q, fresh = {0};
  if ((rc = scratch(call, qkv->dtype, 1, q_shape, &q)))
    return rc;
  rc = rope_heads(call, pattern, &t, qkv, t.first, t.count, &call->in[1], pos,
                  &q);
  if (!rc && from_qkv && t.count > 0) {
    /* The KV heads of the tile's query heads, into a row of the cache's
     * layout and dtype. */
    int64_t g_hi = (t.first + t.count - 1) / group + 1;
    rc = scratch(call, cache->dtype, 1, row_shape, &fresh);
    if (!rc)
      rc = store_kv_row(call, pattern, &t, &kc, qkv, &call->in[1], pos, g, g_hi - g,
                        kc.per_head ? g : 0, &fresh, 0);
  }
  if (!rc) {
    /* KV head g's columns start at g * head_dim of a plane; in a per-head
     * cache at 0. */
    int64_t shift = kc.per_head ? -g * a.head_dim : 0;
    InstKvLayout kv = {.k = cache,
                       .v = cache,
                       .row_stride = 2 * kc.width,
                       .k_offset = shift,
                       .v_offset = kc.width + shift,
                       .fresh = fresh.data ? &fresh : NULL,
                       .fresh_row = pos};
    rc = inst_attend_heads(call, &a, &q, &kv, t.first, t.first + t.count,
                           &call->out[0]);
  }
  free(q.data);
  free(fresh.data);
  return rc;
}

/* ---- mlp (and the split-K projection attention_o shares) -------------------- */

/* The shapes of an mlp tile; sets *inter to I, the intermediate's width.
 * fp: x, Wgu [2I, K], g, Wdt [I, K] (the down weight transposed).
 * Weight-only quantized (qdtype, group): x, qWgu [2I, K] and its scales,
 * g, qWd [K, I] (the down weight as it is: a tile reads its columns) and
 * its scales, both matrices of the same qdtype and group; *gu and *down
 * then describe them. */
static int check_mlp(const AmkInstCall *call, int64_t pattern, int64_t *inter,
                     InstQuantMatrix *gu, InstQuantMatrix *down) {
  static const AmkParamField required[] = {AMK_PARAM_K, AMK_PARAM_N_tile, AMK_PARAM_n_off,
                                           AMK_PARAM_eps};
  int rc;
  bool q = quantized(call);
  if ((rc = q ? require_inputs(call, pattern, 6, "x, qWgu, scales, g, qWd, scales")
              : require_inputs(call, pattern, 4, "x, Wgu, g, Wdt")) ||
      (rc = inst_require_all(call, required, sizeof required / sizeof required[0])))
    return rc;
  const AmkTensorView *x = &call->in[0], *g = &call->in[q ? 3 : 2], *out = &call->out[0];
  if ((rc = inst_require_numeric(call, x, "x")) || (rc = inst_require_numeric(call, g, "g")))
    return rc;
  const char *name = pattern_text(pattern);
  /* x's dtype is the intermediates': an integer one would truncate them. */
  if (inst_dtype_is_integer(x->dtype))
    return inst_fail(call, AMK_INST_ERR_DTYPE, "%s: x is %s, want a float dtype", name,
                     amk_dtype_text_name(x->dtype));
  int64_t k = call->p->K.i, n_off = call->p->n_off.i, n_tile = call->p->N_tile.i;
  if (k <= 0 || x->numel != k)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s: x has %" PRId64 " elements, want K = %" PRId64 " (positive)", name,
                     x->numel, k);
  int64_t i;
  if (q) {
    int32_t qdtype = inst_int_or(call, AMK_PARAM_qdtype, 0);
    int64_t group = inst_int_or(call, AMK_PARAM_group, (int32_t)k);
    if ((rc = inst_quant_matrix(call, &call->in[1], &call->in[2], NULL, qdtype, k, group, gu)))
      return rc;
    i = gu->rows / 2;
    if (i <= 0 || gu->rows != 2 * i)
      return inst_fail(call, AMK_INST_ERR_SHAPE,
                       "%s: qWgu has %" PRId64 " rows, want 2I (a positive even count)", name,
                       gu->rows);
    if ((rc = inst_quant_matrix(call, &call->in[4], &call->in[5], NULL, qdtype, i, group,
                                down)))
      return rc;
    if (down->rows != k)
      return inst_fail(call, AMK_INST_ERR_SHAPE,
                       "%s: qWd has %" PRId64 " rows, want [K, I] = [%" PRId64 ", %" PRId64
                       "] (I = half of qWgu's rows)",
                       name, down->rows, k, i);
  } else {
    const AmkTensorView *wgu = &call->in[1], *wdt = &call->in[3];
    if ((rc = inst_require_numeric(call, wgu, "Wgu")) ||
        (rc = inst_require_numeric(call, wdt, "Wdt")))
      return rc;
    i = wdt->numel / k;
    if (inst_width(wdt) != k || i <= 0 || wdt->numel % k != 0)
      return inst_fail(call, AMK_INST_ERR_SHAPE,
                       "%s: Wdt has %" PRId64 " elements of width %" PRId64
                       ", want [I, K] with K = %" PRId64,
                       name, wdt->numel, inst_width(wdt), k);
    if (inst_width(wgu) != k || wgu->numel % k != 0 || wgu->numel / k != 2 * i)
      return inst_fail(call, AMK_INST_ERR_SHAPE,
                       "%s: Wgu has %" PRId64 " elements of width %" PRId64
                       ", want [2I, K] = [%" PRId64 ", %" PRId64 "] (I = %" PRId64
                       ", Wdt's rows)",
                       name, wgu->numel, inst_width(wgu), 2 * i, k, i);
  }
  if (g->numel != k)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s: g has %" PRId64 " elements, want K = %" PRId64, name, g->numel, k);
  if (out->dtype != AMK_DTYPE_F32 || out->numel != k)
    return inst_fail(call, out->dtype != AMK_DTYPE_F32 ? AMK_INST_ERR_DTYPE : AMK_INST_ERR_SHAPE,
                     "%s: output is %s with %" PRId64 " elements, want the f32 accumulator "
                     "[1, K] with K = %" PRId64,
                     name, amk_dtype_text_name(out->dtype), out->numel, k);
  if (n_off < 0 || n_tile < 0 || n_off > i - n_tile)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s: tile [%" PRId64 ", %" PRId64 ") is outside the intermediate's %" PRId64
                     " columns",
                     name, n_off, n_off + n_tile, i);
  *inter = i;
  return AMK_INST_OK;
}

/* The quantized mlp's share of the down projection: out[n] += p[n] (plus
 * r[n] when `add_residual`), p[n] the fp32 sum over the tile's columns c,
 * in increasing c from 0, of act[c] * Wd[n, n_off + c], Wd the dequantized
 * down weight [K, I] read a row at a time (the plain quantized GEMV's
 * arithmetic: each weight dequantized, then multiplied). The caller
 * checked the shapes. */
static int add_down_partial_quant(const AmkInstCall *call, const AmkTensorView *act,
                                  const InstQuantMatrix *wd, uint32_t residual,
                                  bool add_residual) {
  const AmkTensorView *r = &call->in[residual];
  AmkTensorView *out = &call->out[0];
  int64_t width = out->numel, n_off = call->p->n_off.i, n_tile = call->p->N_tile.i;
  float *a = malloc((size_t)(2 * n_tile + 1) * sizeof *a);
  if (!a)
    return inst_fail(call, AMK_INST_ERR_NOMEM, "out of memory");
  float *w = a + n_tile;
  inst_load_row(act, 0, n_tile, a);
  for (int64_t n = 0; n < width; n++) {
    inst_quant_row_range(wd, n, n_off, n_off + n_tile, w);
    float p = 0.0f;
    for (int64_t c = 0; c < n_tile; c++)
      p += a[c] * w[c];
    float add = add_residual ? inst_load(r, n) + p : p;
    inst_store(out, n, inst_load(out, n) + add);
  }
  free(a);
  return AMK_INST_OK;
}

/* The split-K projection of an accumulating tile (mlp's down, attention_o's
 * o): out[n] += p[n] for every n of the output (plus r[n] when
 * `add_residual`: the residual, the tile at n_off 0's), p[n] the fp32 sum
 * over the tile's columns c, in increasing c from 0, of act[c] *
 * Wt[n_off + c, n], Wt the transposed weight at input `weight` (rows of the
 * output's width) and r the residual at input `residual`. The plain GEMV's
 * arithmetic (gemv.c) on the transposed weight, so the sum of every tile's
 * p is the unfused GEMV split along its K. The caller checked the shapes. */
static int add_down_partial(const AmkInstCall *call, const AmkTensorView *act,
                            uint32_t weight, uint32_t residual, bool add_residual) {
  const AmkTensorView *r = &call->in[residual], *wt = &call->in[weight];
  AmkTensorView *out = &call->out[0];
  int64_t width = out->numel, n_off = call->p->n_off.i, n_tile = call->p->N_tile.i;
  float *a = malloc((size_t)(n_tile + 2 * width + 1) * sizeof *a);
  if (!a)
    return inst_fail(call, AMK_INST_ERR_NOMEM, "out of memory");
  float *p = a + n_tile, *w = p + width;
  inst_load_row(act, 0, n_tile, a);
  for (int64_t n = 0; n < width; n++)
    p[n] = 0.0f;
  for (int64_t c = 0; c < n_tile; c++) { /* row by row: the order of c is each p[n]'s */
    inst_load_row(wt, (n_off + c) * width, width, w);
    for (int64_t n = 0; n < width; n++)
      p[n] += a[c] * w[n];
  }
  for (int64_t n = 0; n < width; n++) {
    float add = add_residual ? inst_load(r, n) + p[n] : p[n];
    inst_store(out, n, inst_load(out, n) + add);
  }
  free(a);
  return AMK_INST_OK;
}

/* x, Wgu, g, Wdt -> the f32 accumulator [1, K], for intermediate columns
 * [n_off, n_off + N_tile): xn = RMSNORM(x, g) as run_norm, the stacked
 * gate|up GEMV of those columns into a [2, I] scratch, SILU_MUL of them
 * (all scratch of x's dtype, the unfused intermediates'), then the tile's
 * share of the down projection (Wdt, input 3) added into the output with x
 * (input 0) as the residual (add_down_partial). Quantized (x, qWgu,
 * scales, g, qWd, scales): the gate|up GEMV is the quantized plain tile's
 * and the share reads columns of qWd (add_down_partial_quant).
 * The engine zeroes the accumulator before each step and must not let two
 * tiles add at once. */
static int run_mlp(const AmkInstCall *call, int64_t pattern) {
  int64_t inter = 0;
  InstQuantMatrix qgu, qdown;
  int rc = check_mlp(call, pattern, &inter, &qgu, &qdown);
  if (rc)
    return rc;
  bool q = quantized(call);
  const AmkTensorView *x = &call->in[0];
  int64_t n_off = call->p->n_off.i, n_tile = call->p->N_tile.i;
  AmkInstParams norm_params = {0};
  norm_params.hidden.i = call->p->K.i;
  norm_params.eps = call->p->eps;
  norm_params.present = AMK_PARAM_BIT(hidden) | AMK_PARAM_BIT(eps);
  AmkInstParams none = {0};
  int64_t gu_shape[2] = {2, inter}, act_shape[1] = {n_tile};
  AmkTensorView xn = {0}, gu = {0}, act = {0};
  if (!(rc = scratch(call, x->dtype, x->rank, x->shape, &xn)) &&
      !(rc = scratch(call, x->dtype, 2, gu_shape, &gu)) &&
      !(rc = scratch(call, x->dtype, 1, act_shape, &act))) {
    AmkTensorView norm_in[2] = {*x, call->in[q ? 3 : 2]};
    AmkTensorView halves[2] = {slice(&gu, n_off, n_tile), slice(&gu, inter + n_off, n_tile)};
    if (!(rc = step(call, pattern, AMK_OP_RMSNORM, amk_kernel_RMSNORM, &norm_params, norm_in,
                    2, &xn)) &&
        !(rc = gemv_step(call, pattern, &xn, &gu)) &&
        !(rc = step(call, pattern, AMK_OP_SILU_MUL, amk_kernel_SILU_MUL, &none, halves, 2,
                    &act))) {
      bool first = n_off == 0 && !(call->p->flags.i & AMK_FLAG_MLP_NO_RESIDUAL);
      rc = q ? add_down_partial_quant(call, &act, &qdown, 0, first)
             : add_down_partial(call, &act, 3, 0, first);
    }
  }
  free(xn.data);
  free(gu.data);
  free(act.data);
  return rc;
}

/* ---- attention_o ------------------------------------------------------------ */

/* The shapes and params of an attention_o tile; sets *head to its query head
 * h = n_off / head_dim. What only the attention reads (inv_freq, the cache,
 * the window, the position) run_attention_rope checks when it runs, still
 * before anything is added to the output. */
static int check_attention_o(const AmkInstCall *call, int64_t pattern, int64_t *head) {
  static const AmkParamField required[] = {
      AMK_PARAM_K,       AMK_PARAM_N_tile,     AMK_PARAM_n_off,    AMK_PARAM_head_dim,
      AMK_PARAM_n_heads, AMK_PARAM_n_kv_heads, AMK_PARAM_kv_start, AMK_PARAM_kv_len,
      AMK_PARAM_scale,   AMK_PARAM_flags};
  int rc;
  if ((rc = require_fp_weights(call, pattern)) ||
      (rc = require_inputs(call, pattern, 5, "qkv, Wot, inv_freq, kv_cache, x")) ||
      (rc = inst_require_all(call, required, sizeof required / sizeof required[0])))
    return rc;
  const char *name = pattern_text(pattern);
  const AmkInstParams *p = call->p;
  /* Bit 2 alone: the tile takes row pos from qkv (nothing orders it after
   * rope_kv's store), attends over the whole window (no partial, bit 1) and
   * always adds the residual at n_off 0 (no mlp-style bit 0). */
  int64_t low = (uint32_t)p->flags.i & ((UINT32_C(1) << AMK_PATTERN_SHIFT) - 1);
  if (low != AMK_FLAG_KV_FROM_QKV)
    return inst_fail(call, AMK_INST_ERR_PARAM,
                     "%s: flags bits 0-15 are %" PRId64 ", want %d (bit 2 alone: row pos "
                     "from qkv, the whole window)",
                     name, low, AMK_FLAG_KV_FROM_QKV);
  HeadTile t = {.head_dim = p->head_dim.i, .n_heads = p->n_heads.i, .n_kv = p->n_kv_heads.i};
  if ((rc = check_head_counts(call, pattern, &t)))
    return rc;
  /* n_off / N_tile count columns of the attention output, inside one head. */
  int64_t cols = t.n_heads * t.head_dim, n_off = p->n_off.i, n_tile = p->N_tile.i;
  if (n_tile < 1)
    return inst_fail(call, AMK_INST_ERR_SHAPE, "%s: N_tile is %" PRId64 ", want at least 1",
                     name, n_tile);
  if (n_off < 0 || n_off > cols - n_tile)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s: columns [%" PRId64 ", %" PRId64 ") are outside the attention "
                     "output's %" PRId64 " (n_heads x head_dim)",
                     name, n_off, n_off + n_tile, cols);
  if (n_off % t.head_dim + n_tile > t.head_dim)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s: columns [%" PRId64 ", %" PRId64 ") cross the end of head %" PRId64
                     " (head_dim %" PRId64 "); a tile's columns lie inside one head",
                     name, n_off, n_off + n_tile, n_off / t.head_dim, t.head_dim);
  const AmkTensorView *qkv = &call->in[0], *wot = &call->in[1], *x = &call->in[4],
                      *out = &call->out[0];
  if ((rc = check_qkv(call, pattern, &t, qkv)) ||
      (rc = inst_require_numeric(call, wot, "Wot")) ||
      (rc = inst_require_numeric(call, x, "x")))
    return rc;
  /* Float operands only: qkv's dtype is the attention output's (an integer
   * one would truncate it), and Wot and x are the fp weight and residual. */
  const AmkTensorView *floats[3] = {qkv, wot, x};
  const char *roles[3] = {"qkv", "Wot", "x"};
  for (int i = 0; i < 3; i++)
    if (inst_dtype_is_integer(floats[i]->dtype))
      return inst_fail(call, AMK_INST_ERR_DTYPE, "%s: %s is %s, want a float dtype", name,
                       roles[i], amk_dtype_text_name(floats[i]->dtype));
  if (p->K.i != qkv->numel || inst_width(qkv) != qkv->numel)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s: qkv has %" PRId64 " elements of width %" PRId64
                     ", want one row of K = %d",
                     name, qkv->numel, inst_width(qkv), (int)p->K.i);
  int64_t hidden = inst_width(wot);
  if (hidden <= 0 || wot->numel != cols * hidden)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s: Wot has %" PRId64 " elements of width %" PRId64
                     ", want [n_heads x head_dim, hidden] with %" PRId64 " rows",
                     name, wot->numel, hidden, cols);
  if (x->numel != hidden)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s: x has %" PRId64 " elements, want hidden = %" PRId64 " (Wot's width)",
                     name, x->numel, hidden);
  if (out->dtype != AMK_DTYPE_F32 || out->numel != hidden)
    return inst_fail(call, out->dtype != AMK_DTYPE_F32 ? AMK_INST_ERR_DTYPE : AMK_INST_ERR_SHAPE,
                     "%s: output is %s with %" PRId64 " elements, want the f32 accumulator "
                     "[1, hidden] with hidden = %" PRId64,
                     name, amk_dtype_text_name(out->dtype), out->numel, hidden);
  *head = n_off / t.head_dim;
  return AMK_INST_OK;
}

/* qkv, Wot, inv_freq, kv_cache, x -> the f32 accumulator [1, hidden], for
 * attention columns [n_off, n_off + N_tile) of query head h: o = exactly
 * the attention_rope tile of head h alone (n_off h, N_tile 1, the same
 * params and flags bit 2, the caller's position) into scratch of qkv's
 * dtype, the unfused attention output's; then the tile's share of the o
 * projection (Wot, input 1) added into the output with x (input 4) as the
 * residual (add_down_partial). Every tile of a head recomputes its
 * attention: each is one task, with no wait between its two halves. */
static int run_attention_o(const AmkInstCall *call, int64_t pattern) {
  int64_t head = 0;
  int rc = check_attention_o(call, pattern, &head);
  if (rc)
    return rc;
  const AmkTensorView *qkv = &call->in[0];
  int64_t n_off = call->p->n_off.i, n_tile = call->p->N_tile.i;
  AmkInstParams one_head = *call->p;
  one_head.n_off.i = (int32_t)head;
  one_head.N_tile.i = 1;
  one_head.flags.i = AMK_PATTERN_ATTENTION_ROPE << AMK_PATTERN_SHIFT | AMK_FLAG_KV_FROM_QKV;
  int64_t o_shape[1] = {(int64_t)one_head.n_heads.i * one_head.head_dim.i};
  AmkTensorView o;
  if ((rc = scratch(call, qkv->dtype, 1, o_shape, &o)))
    return rc;
  /* The attention runs as this call (its extra, its error text, this
   * pattern's name) over attention_rope's inputs and the scratch. */
  AmkTensorView attention_in[3] = {*qkv, call->in[2], call->in[3]};
  AmkInstCall attention = *call;
  attention.p = &one_head;
  attention.in = attention_in;
  attention.n_in = 3;
  attention.out = &o;
  attention.n_out = 1;
  rc = run_attention_rope(&attention, pattern);
  if (!rc) {
    AmkTensorView act = slice(&o, n_off, n_tile);
    rc = add_down_partial(call, &act, 1, 4, n_off == 0);
  }
  free(o.data);
  return rc;
}

/* GEMV_TILE: flags >> AMK_PATTERN_SHIFT picks the plain tile (gemv.c) or a
 * fused pattern. Every pattern has a case (no default): a pattern added to
 * AMK_GEMV_PATTERNS fails to compile here until it has a kernel. */
int amk_kernel_GEMV_TILE(const AmkInstCall *call) {
  int64_t pattern = (int64_t)(uint32_t)inst_int_or(call, AMK_PARAM_flags, 0) >>
                    AMK_PATTERN_SHIFT;
  if (pattern >= AMK_PATTERN_COUNT)
    return inst_fail(call, AMK_INST_ERR_PARAM,
                     "unknown fused pattern %" PRId64 " (flags >> %d)", pattern,
                     AMK_PATTERN_SHIFT);
  switch ((AmkGemvPattern)pattern) {
  case AMK_PATTERN_PLAIN:
    return inst_gemv_plain(call);
  case AMK_PATTERN_NORM:
    return run_norm(call, pattern);
  case AMK_PATTERN_RESIDUAL:
    return run_residual(call, pattern);
  case AMK_PATTERN_SILU:
    return run_silu(call, pattern, false);
  case AMK_PATTERN_SILU_RESIDUAL:
    return run_silu(call, pattern, true);
  case AMK_PATTERN_ROPE_KV:
    return run_rope_kv(call, pattern);
  case AMK_PATTERN_ATTENTION:
    return run_attention(call, pattern);
  case AMK_PATTERN_ATTENTION_ROPE:
    return run_attention_rope(call, pattern);
  case AMK_PATTERN_COMBINE_RESIDUAL:
    return run_combine_residual(call, pattern);
  case AMK_PATTERN_MLP:
    return run_mlp(call, pattern);
  case AMK_PATTERN_ATTENTION_O:
    return run_attention_o(call, pattern);
  case AMK_PATTERN_COUNT:
    break;
  }
  return inst_fail(call, AMK_INST_ERR_PARAM, "unknown fused pattern %" PRId64,
                   pattern);
}
