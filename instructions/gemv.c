/* GEMV_TILE and GEMM_TILE: out[m, n_off + j] = sum_k x[m, k] * W[n_off + j, k]
 * (+ bias[n_off + j]) for a tile of N_tile output columns, with fp weights
 * [N, K] or weight-only int8/int4 weights [x, qW, scales]. A GEMV tile whose
 * output has R rows and whose weight R * width rows writes all R rows of its
 * columns (stacked gate|up). flags >> 16 selects a fused pattern:
 * amk_kernel_GEMV_TILE is in patterns.c, which calls the plain tile here. */
#include <inttypes.h>
#include <stdlib.h>

#include "inst_internal.h"

/* Where the tile's weights come from. */
typedef struct {
  const AmkTensorView *fp; /* fp weights, or NULL when quantized */
  InstQuantMatrix quant;
  int64_t rows;
} TileWeights;

static void load_weight_row(const TileWeights *w, int64_t row, int64_t k_len,
                            float *dst) {
  if (w->fp) {
    inst_load_row(w->fp, row * k_len, k_len, dst);
  } else {
    inst_quant_row(&w->quant, row, dst);
  }
}

static int check_weights(const AmkInstCall *call, int64_t k_len,
                         TileWeights *w) {
  int rc;
  int32_t qdtype = inst_int_or(call, AMK_PARAM_qdtype, 0);
  if (qdtype == AMK_QDTYPE_INT8 || qdtype == AMK_QDTYPE_INT4) {
    if (call->n_in < 3)
      return inst_fail(call, AMK_INST_ERR_ARITY,
                       "quantized weights need inputs [x, qW, scales]");
    int32_t group = inst_int_or(call, AMK_PARAM_group, (int32_t)k_len);
    w->fp = NULL;
    if ((rc = inst_quant_matrix(call, &call->in[1], &call->in[2], NULL, qdtype,
                                k_len, group, &w->quant)))
      return rc;
    w->rows = w->quant.rows;
    return AMK_INST_OK;
  }
  const AmkTensorView *weights = &call->in[1];
  if ((rc = inst_require_numeric(call, weights, "weight")))
    return rc;
  if (inst_width(weights) != k_len)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "weight rows have %" PRId64 " columns, want K = %" PRId64,
                     inst_width(weights), k_len);
  w->fp = weights;
  w->rows = weights->numel / k_len;
  return AMK_INST_OK;
}

/* `tiled_rows`: GEMM_TILE computes rows [m_off, m_off + M_tile) of x;
 * GEMV_TILE computes every row. */
static int run_matmul_tile(const AmkInstCall *call, bool tiled_rows) {
  int rc;
  if ((rc = inst_require(call, AMK_PARAM_K)) ||
      (rc = inst_require(call, AMK_PARAM_N_tile)) ||
      (rc = inst_require(call, AMK_PARAM_n_off)) ||
      (tiled_rows && (rc = inst_require(call, AMK_PARAM_M_tile))))
    return rc;
  const AmkTensorView *x = &call->in[0];
  AmkTensorView *out = &call->out[0];
  int64_t k_len = call->p->K.i;
  int64_t n_tile = call->p->N_tile.i, n_off = call->p->n_off.i;
  if ((rc = inst_require_numeric(call, x, "input")) ||
      (rc = inst_require_numeric(call, out, "output")))
    return rc;
  if (k_len <= 0 || x->numel % k_len != 0)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "K = %" PRId64 " does not divide the input's %" PRId64
                     " elements",
                     k_len, x->numel);
  TileWeights w;
  if ((rc = check_weights(call, k_len, &w)))
    return rc;
  int64_t m_total = x->numel / k_len;
  int64_t n_out = inst_width(out);
  /* Stacked (GEMV only): one input row, an output of R rows and a weight of
   * R * n_out rows; output row r takes weight rows r * n_out + column. */
  int64_t stack = 1;
  if (!tiled_rows && m_total == 1 && n_out > 0 && out->numel > n_out &&
      out->numel % n_out == 0 && w.rows == out->numel)
    stack = out->numel / n_out;
  if (stack == 1 && out->numel != m_total * n_out)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "output has %" PRId64 " elements, want %" PRId64
                     " rows of %" PRId64
                     " (or, stacked, a weight of one row per output element)",
                     out->numel, m_total, n_out);
  if (n_off < 0 || n_tile < 0 || n_off + n_tile > w.rows / stack ||
      n_off + n_tile > n_out)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "tile [%" PRId64 ", %" PRId64 ") exceeds the %" PRId64
                     " weight rows or %" PRId64 " output columns",
                     n_off, n_off + n_tile, w.rows / stack, n_out);
  int64_t m_begin = 0, m_end = m_total;
  if (tiled_rows) {
    int64_t m_off = inst_int_or(call, AMK_PARAM_m_off, 0);
    int64_t m_tile = call->p->M_tile.i;
    if (m_off < 0 || m_tile < 0 || m_off + m_tile > m_total)
      return inst_fail(call, AMK_INST_ERR_SHAPE,
                       "row tile [%" PRId64 ", %" PRId64
                       ") exceeds the input's %" PRId64 " rows",
                       m_off, m_off + m_tile, m_total);
    m_begin = m_off;
    m_end = m_off + m_tile;
  }
  const AmkTensorView *bias = (w.fp && call->n_in > 2) ? &call->in[2] : NULL;
  if (bias) {
    if ((rc = inst_require_numeric(call, bias, "bias")))
      return rc;
    if (bias->numel != w.rows)
      return inst_fail(call, AMK_INST_ERR_SHAPE,
                       "bias has %" PRId64 " elements, want %" PRId64,
                       bias->numel, w.rows);
  }

  /* x rows widened once; weight rows ROW_BLOCK at a time. Each output keeps
   * its own accumulator summed in ascending k (the frozen order); working on
   * several rows at once only overlaps their independent add chains. */
  enum { ROW_BLOCK = 4 };
  int64_t m_count = m_end - m_begin;
  float *x_rows = malloc((size_t)(m_count * k_len + ROW_BLOCK * k_len) * sizeof(float));
  if (!x_rows)
    return inst_fail(call, AMK_INST_ERR_NOMEM, "out of memory");
  float *w_rows = x_rows + m_count * k_len;
  inst_load_row(x, m_begin * k_len, m_count * k_len, x_rows);
  int64_t total_rows = stack * n_tile;
  for (int64_t first = 0; first < total_rows; first += ROW_BLOCK) {
    int64_t count = total_rows - first < ROW_BLOCK ? total_rows - first : ROW_BLOCK;
    int64_t weight_row[ROW_BLOCK];
    for (int64_t b = 0; b < count; b++) {
      int64_t r = (first + b) / n_tile, j = (first + b) % n_tile;
      weight_row[b] = r * n_out + n_off + j; /* also the column when r = 0 */
      load_weight_row(&w, weight_row[b], k_len, w_rows + b * k_len);
    }
    for (int64_t m = 0; m < m_count; m++) {
      const float *xr = x_rows + m * k_len;
      float acc[ROW_BLOCK] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (count == ROW_BLOCK) {
        const float *w0 = w_rows, *w1 = w0 + k_len, *w2 = w1 + k_len, *w3 = w2 + k_len;
        for (int64_t k = 0; k < k_len; k++) {
          acc[0] += xr[k] * w0[k];
          acc[1] += xr[k] * w1[k];
          acc[2] += xr[k] * w2[k];
          acc[3] += xr[k] * w3[k];
        }
      } else {
        for (int64_t b = 0; b < count; b++)
          for (int64_t k = 0; k < k_len; k++)
            acc[b] += xr[k] * w_rows[b * k_len + k];
      }
      for (int64_t b = 0; b < count; b++) {
        float v = acc[b];
        if (bias)
          v += inst_load(bias, weight_row[b]);
        inst_store(out, (m_begin + m) * n_out + weight_row[b], v);
      }
    }
  }
  free(x_rows);
  return AMK_INST_OK;
}

int inst_gemv_plain(const AmkInstCall *call) {
  return run_matmul_tile(call, false);
}

/* flags bits 16-31 name a fused pattern (docs/Fusion.md); 0 is plain. */
int amk_kernel_GEMM_TILE(const AmkInstCall *call) {
  return run_matmul_tile(call, true);
}
