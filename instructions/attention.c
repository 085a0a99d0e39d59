/* ATTENTION_TILE (decode attention over a KV window, whole or as a split-KV
 * partial) and ATTENTION_COMBINE (the flash-decoding merge). The per-head
 * loop (inst_attend_heads) is shared with the fused attention patterns
 * (patterns.c), so fused and unfused attention run the same float ops. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

#include "inst_internal.h"

/* flags bit 0: causal over several query rows; bit 1: write the
 * unnormalised partial [n_heads, head_dim + 2]. */
#define ATTENTION_FLAG_CAUSAL 1
#define ATTENTION_FLAG_PARTIAL 2

int inst_attention_params(const AmkInstCall *call, InstAttention *a) {
  static const AmkParamField required[] = {
      AMK_PARAM_head_dim, AMK_PARAM_kv_start,  AMK_PARAM_kv_len,
      AMK_PARAM_scale,    AMK_PARAM_n_heads,   AMK_PARAM_n_kv_heads};
  int rc = inst_require_all(call, required, sizeof required / sizeof required[0]);
  if (rc)
    return rc;
  const AmkInstParams *p = call->p;
  *a = (InstAttention){.head_dim = p->head_dim.i,
                       .n_heads = p->n_heads.i,
                       .n_kv_heads = p->n_kv_heads.i,
                       .kv_start = p->kv_start.i,
                       .kv_len = p->kv_len.i,
                       .scale = p->scale.f,
                       .partial = (inst_int_or(call, AMK_PARAM_flags, 0) &
                                   ATTENTION_FLAG_PARTIAL) != 0};
  if (a->head_dim <= 0 || a->n_heads <= 0 || a->n_kv_heads <= 0 ||
      a->n_heads % a->n_kv_heads != 0)
    return inst_fail(call, AMK_INST_ERR_PARAM,
                     "head_dim %" PRId64 ", n_heads %" PRId64
                     ", n_kv_heads %" PRId64
                     " must be positive with n_kv_heads dividing n_heads",
                     a->head_dim, a->n_heads, a->n_kv_heads);
  return AMK_INST_OK;
}

int inst_attention_check_window(const AmkInstCall *call, const InstAttention *a,
                                int64_t rows) {
  if (a->kv_start < 0 || a->kv_len < 0 || a->kv_start > rows - a->kv_len)
    return inst_fail(call, AMK_INST_ERR_INDEX,
                     "window [%" PRId64 ", %" PRId64
                     ") is outside the cache's %" PRId64 " rows",
                     a->kv_start, a->kv_start + a->kv_len, rows);
  return AMK_INST_OK;
}

int inst_attention_check_output(const AmkInstCall *call, const InstAttention *a,
                                const AmkTensorView *out) {
  int rc = inst_require_numeric(call, out, "output");
  if (rc)
    return rc;
  int64_t want = a->n_heads * (a->head_dim + (a->partial ? 2 : 0));
  if (out->numel != want)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "output has %" PRId64 " elements, want %" PRId64 "%s",
                     out->numel, want,
                     a->partial ? " (n_heads x (head_dim + 2), partial)" : "");
  return AMK_INST_OK;
}

/* q and the output hold `rows` query rows of n_heads x head_dim each (a
 * prefill chunk); a partial holds one. */
static int check_attention(const AmkInstCall *call, InstAttention *a, int64_t *rows) {
  int rc;
  if ((rc = inst_attention_params(call, a)))
    return rc;
  const AmkTensorView *q = &call->in[0], *k = &call->in[1], *v = &call->in[2];
  if ((rc = inst_require_numeric(call, q, "q")) ||
      (rc = inst_require_numeric(call, k, "k cache")) ||
      (rc = inst_require_numeric(call, v, "v cache")) ||
      (rc = inst_require_same_numel(call, k, "k cache", v, "v cache")))
    return rc;
  int64_t q_row = a->n_heads * a->head_dim;
  if (q->numel == 0 || q->numel % q_row != 0 || (a->partial && q->numel != q_row))
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "q has %" PRId64 " elements, want %s n_heads x head_dim = %" PRId64,
                     q->numel, a->partial ? "(a partial: one row of)" : "rows of", q_row);
  *rows = q->numel / q_row;
  int64_t row_len = a->n_kv_heads * a->head_dim;
  if (k->numel % row_len != 0)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "the caches' %" PRId64 " elements are not rows of n_kv_heads x "
                     "head_dim = %" PRId64,
                     k->numel, row_len);
  if ((rc = inst_attention_check_window(call, a, k->numel / row_len)))
    return rc;
  if (*rows == 1)
    return inst_attention_check_output(call, a, &call->out[0]);
  const AmkTensorView *out = &call->out[0];
  if ((rc = inst_require_numeric(call, out, "output")))
    return rc;
  if (out->numel != q->numel)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "output has %" PRId64 " elements, want %" PRId64 " (%" PRId64
                     " query rows of n_heads x head_dim)",
                     out->numel, q->numel, *rows);
  return AMK_INST_OK;
}

/* Element `col` of cache row `row` of view *t (kv->k or kv->v), or of the
 * fresh row. */
static float kv_load(const InstKvLayout *kv, const AmkTensorView *t, int64_t row,
                     int64_t col) {
  if (kv->fresh && row == kv->fresh_row)
    return inst_load(kv->fresh, col);
  return inst_load(t, row * kv->row_stride + col);
}

/* Query head h reads kv head h / (n_heads / n_kv_heads) over rows
 * [kv_start, kv_start + kv_len): s_j = (q . k_j) * scale, m = max s,
 * e_j = exp(s_j - m), l = sum e. Whole: out = sum_j (e_j / l) v_j.
 * Partial: acc = sum_j e_j v_j, then m, l. */
int inst_attend_heads(const AmkInstCall *call, const InstAttention *a,
                      const AmkTensorView *q, const InstKvLayout *kv,
                      int64_t h_begin, int64_t h_end, AmkTensorView *out) {
  int64_t hd = a->head_dim;
  int64_t out_stride = a->partial ? hd + 2 : hd;
  int64_t group = a->n_heads / a->n_kv_heads;
  float *weights = malloc((size_t)(a->kv_len ? a->kv_len : 1) * sizeof *weights);
  if (!weights)
    return inst_fail(call, AMK_INST_ERR_NOMEM, "out of memory");
  for (int64_t h = h_begin; h < h_end; h++) {
    int64_t kv_col = (h / group) * hd;
    float max = -INFINITY, sum = 0.0f;
    for (int64_t j = 0; j < a->kv_len; j++) {
      int64_t col = kv->k_offset + kv_col;
      float dot = 0.0f;
      for (int64_t d = 0; d < hd; d++)
        dot += inst_load(q, h * hd + d) * kv_load(kv, kv->k, a->kv_start + j, col + d);
      weights[j] = dot * a->scale;
      if (isnan(weights[j]) || weights[j] > max)
        max = weights[j];
    }
    for (int64_t j = 0; j < a->kv_len; j++) {
      weights[j] = expf(weights[j] - max);
      sum += weights[j];
    }
    if (!a->partial)
      for (int64_t j = 0; j < a->kv_len; j++)
        weights[j] /= sum;
    for (int64_t d = 0; d < hd; d++) {
      float acc = 0.0f;
      for (int64_t j = 0; j < a->kv_len; j++)
        acc += weights[j] * kv_load(kv, kv->v, a->kv_start + j, kv->v_offset + kv_col + d);
      inst_store(out, h * out_stride + d, acc);
    }
    if (a->partial) {
      /* An empty window leaves m = -inf, l = 0: zero weight in the combine. */
      inst_store(out, h * out_stride + hd, max);
      inst_store(out, h * out_stride + hd + 1, sum);
    }
  }
  free(weights);
  return AMK_INST_OK;
}

/* Row r of a [rows, width] view as a [width] view of its own. */
static AmkTensorView row_view(const AmkTensorView *t, int64_t r, int64_t width) {
  AmkTensorView v = *t;
  v.data = (char *)t->data + amk_dtype_nbytes(t->dtype, r * width);
  v.rank = 1;
  v.shape[0] = width;
  v.numel = width;
  return v;
}

/* The sub-rectangle of a multi-row task's output it computes: query heads
 * [n_off, n_off + N_tile) (whole GQA groups) and query rows [m_off,
 * m_off + M_tile); each pair is optional (absent: all heads, all rows). */
typedef struct {
  int64_t head_lo, head_hi, row_lo, row_hi;
} AttentionRect;

static int attention_rect(const AmkInstCall *call, const InstAttention *a, int64_t rows,
                          AttentionRect *rect) {
  const AmkInstParams *p = call->p;
  bool has_heads = amk_inst_param_has(p, AMK_PARAM_n_off) || amk_inst_param_has(p, AMK_PARAM_N_tile);
  bool has_rows = amk_inst_param_has(p, AMK_PARAM_m_off) || amk_inst_param_has(p, AMK_PARAM_M_tile);
  *rect = (AttentionRect){0, a->n_heads, 0, rows};
  if ((has_heads || has_rows) && a->partial)
    return inst_fail(call, AMK_INST_ERR_PARAM,
                     "a partial write covers every head of its one row; n_off, N_tile, "
                     "m_off and M_tile select part of a whole (flags bit 1 clear) output");
  if (has_heads) {
    int64_t group = a->n_heads / a->n_kv_heads;
    int64_t off = inst_int_or(call, AMK_PARAM_n_off, -1), n = inst_int_or(call, AMK_PARAM_N_tile, -1);
    if (off < 0 || n < 1 || off + n > a->n_heads || off % group || n % group)
      return inst_fail(call, AMK_INST_ERR_PARAM,
                       "query heads n_off %" PRId64 ", N_tile %" PRId64
                       " must both be given and select whole GQA groups of %" PRId64
                       " within the %" PRId64 " heads",
                       off, n, group, a->n_heads);
    rect->head_lo = off;
    rect->head_hi = off + n;
  }
  if (has_rows) {
    int64_t off = inst_int_or(call, AMK_PARAM_m_off, -1), n = inst_int_or(call, AMK_PARAM_M_tile, -1);
    if (off < 0 || n < 1 || off + n > rows)
      return inst_fail(call, AMK_INST_ERR_PARAM,
                       "query rows m_off %" PRId64 ", M_tile %" PRId64
                       " must both be given and lie within the %" PRId64 " rows of q",
                       off, n, rows);
    rect->row_lo = off;
    rect->row_hi = off + n;
  }
  return AMK_INST_OK;
}

/* inputs [q, k cache, v cache(, ignored)], caches [max_seq, n_kv, head_dim].
 * Several query rows (a prefill chunk of M rows): with flags bit 0 (causal)
 * row r reads [kv_start, kv_start + kv_len - (M - 1 - r)), so the last row
 * reads the whole window; without it every row reads the whole window.
 * Only the sub-rectangle of attention_rect is computed (and written); a
 * row's window depends on r, its index in the whole chunk, not on m_off. */
int amk_kernel_ATTENTION_TILE(const AmkInstCall *call) {
  InstAttention a;
  int64_t rows = 1;
  int rc = check_attention(call, &a, &rows);
  if (rc)
    return rc;
  AttentionRect rect;
  if ((rc = attention_rect(call, &a, rows, &rect)))
    return rc;
  InstKvLayout kv = {.k = &call->in[1],
                     .v = &call->in[2],
                     .row_stride = a.n_kv_heads * a.head_dim,
                     .k_offset = 0,
                     .v_offset = 0};
  if (rows == 1)
    return inst_attend_heads(call, &a, &call->in[0], &kv, rect.head_lo, rect.head_hi,
                             &call->out[0]);
  bool causal = (inst_int_or(call, AMK_PARAM_flags, 0) & ATTENTION_FLAG_CAUSAL) != 0;
  int64_t width = a.n_heads * a.head_dim;
  for (int64_t r = rect.row_lo; r < rect.row_hi && rc == AMK_INST_OK; r++) {
    InstAttention row = a;
    if (causal) {
      int64_t len = a.kv_len - (rows - 1 - r);
      row.kv_len = len > 0 ? len : 0;
    }
    AmkTensorView q = row_view(&call->in[0], r, width);
    AmkTensorView out = row_view(&call->out[0], r, width);
    rc = inst_attend_heads(call, &row, &q, &kv, rect.head_lo, rect.head_hi, &out);
  }
  return rc;
}
/* inputs: P partials [n_heads, head_dim + 2] -> output [n_heads * head_dim].
 * m = max_p m_p; w_p = exp(m_p - m), or 0 when l_p = 0;
 * out = sum_p acc_p w_p / max(sum_p l_p w_p, 1e-20). head_dim and n_heads
 * come from the params when given, else from the element counts. */
int amk_kernel_ATTENTION_COMBINE(const AmkInstCall *call) {
  AmkTensorView *out = &call->out[0];
  const AmkTensorView *first = &call->in[0];
  int rc = inst_require_numeric_like(call, "partial", "a partial", first, "partial 0");
  if (rc)
    return rc;
  int64_t head_dim, n_heads;
  if (amk_inst_param_has(call->p, AMK_PARAM_head_dim)) {
    head_dim = call->p->head_dim.i;
    n_heads = head_dim > 0 ? first->numel / (head_dim + 2) : 0;
  } else {
    n_heads = (first->numel - out->numel) / 2; /* each head adds m and l */
    head_dim = n_heads > 0 ? out->numel / n_heads : 0;
  }
  if (amk_inst_param_has(call->p, AMK_PARAM_n_heads) &&
      call->p->n_heads.i != n_heads)
    n_heads = -1;
  if (head_dim <= 0 || n_heads <= 0 ||
      first->numel != n_heads * (head_dim + 2) ||
      out->numel != n_heads * head_dim)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "partials of %" PRId64 " and an output of %" PRId64
                     " elements are not [n_heads, head_dim + 2] and "
                     "[n_heads * head_dim] for the given params",
                     first->numel, out->numel);
  int64_t stride = head_dim + 2;
  float weight[AMK_MAX_INPUTS];
  for (int64_t h = 0; h < n_heads; h++) {
    float max = -INFINITY;
    for (uint32_t p = 0; p < call->n_in; p++) {
      float m_p = inst_load(&call->in[p], h * stride + head_dim);
      if (m_p > max)
        max = m_p;
    }
    float denom = 0.0f;
    for (uint32_t p = 0; p < call->n_in; p++) {
      float m_p = inst_load(&call->in[p], h * stride + head_dim);
      float l_p = inst_load(&call->in[p], h * stride + head_dim + 1);
      weight[p] = l_p > 0.0f ? expf(m_p - max) : 0.0f;
      denom += l_p * weight[p];
    }
    if (denom < 1e-20f)
      denom = 1e-20f;
    for (int64_t d = 0; d < head_dim; d++) {
      float acc = 0.0f;
      for (uint32_t p = 0; p < call->n_in; p++)
        acc += inst_load(&call->in[p], h * stride + d) * weight[p];
      inst_store(out, h * head_dim + d, acc / denom);
    }
  }
  return AMK_INST_OK;
}
