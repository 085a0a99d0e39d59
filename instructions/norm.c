/* RMSNORM and LAYERNORM, per row of `hidden` elements. */
#include <inttypes.h>
#include <math.h>

#include "inst_internal.h"

/* The common checks: hidden > 0 divides x, each per-channel vector has
 * `hidden` elements, the output matches x. */
static int check_norm(const AmkInstCall *call, int64_t *hidden_out) {
  int rc;
  if ((rc = inst_require(call, AMK_PARAM_hidden)) ||
      (rc = inst_require(call, AMK_PARAM_eps)))
    return rc;
  int64_t hidden = call->p->hidden.i;
  const AmkTensorView *x = &call->in[0];
  if (hidden <= 0 || x->numel % hidden != 0)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "hidden %" PRId64 " does not divide the input's %" PRId64
                     " elements",
                     hidden, x->numel);
  for (uint32_t i = 0; i < call->n_in; i++) {
    if ((rc = inst_require_numeric(call, &call->in[i], "input")))
      return rc;
    if (i > 0 && call->in[i].numel != hidden)
      return inst_fail(call, AMK_INST_ERR_SHAPE,
                       "input %u has %" PRId64 " elements, want hidden = %" PRId64,
                       i, call->in[i].numel, hidden);
  }
  if ((rc = inst_require_numeric(call, &call->out[0], "output")) ||
      (rc = inst_require_same_numel(call, x, "input", &call->out[0], "output")))
    return rc;
  *hidden_out = hidden;
  return AMK_INST_OK;
}

/* One row of `hidden` elements from `base`: out = x * rsqrt(mean(x^2) + eps) * w,
 * or * (1 + w) with flags bit AMK_FLAG_NORM_PLUS_ONE (Gemma: 1 + w in fp32,
 * then the product, rounded once to the output's dtype). */
static void rmsnorm_row(const AmkInstCall *call, int64_t base, int64_t hidden, float eps) {
  const AmkTensorView *x = &call->in[0], *w = &call->in[1];
  AmkTensorView *out = &call->out[0];
  float offset = (inst_int_or(call, AMK_PARAM_flags, 0) & AMK_FLAG_NORM_PLUS_ONE) ? 1.0f : 0.0f;
  float sum_sq = 0.0f;
  for (int64_t j = 0; j < hidden; j++) {
    float v = inst_load(x, base + j);
    sum_sq += v * v;
  }
  float inv_rms = 1.0f / sqrtf(sum_sq / (float)hidden + eps);
  for (int64_t j = 0; j < hidden; j++)
    inst_store(out, base + j,
               inst_load(x, base + j) * inv_rms * (offset + inst_load(w, j)));
}

/* One row: out = (x - mean) * rsqrt(var + eps) * w (+ b), with the biased
 * variance. */
static void layernorm_row(const AmkInstCall *call, int64_t base, int64_t hidden, float eps) {
  const AmkTensorView *x = &call->in[0], *w = &call->in[1];
  const AmkTensorView *bias = call->n_in > 2 ? &call->in[2] : NULL;
  AmkTensorView *out = &call->out[0];
  float sum = 0.0f;
  for (int64_t j = 0; j < hidden; j++)
    sum += inst_load(x, base + j);
  float mean = sum / (float)hidden;
  float sum_sq = 0.0f;
  for (int64_t j = 0; j < hidden; j++) {
    float d = inst_load(x, base + j) - mean;
    sum_sq += d * d;
  }
  float inv_std = 1.0f / sqrtf(sum_sq / (float)hidden + eps);
  for (int64_t j = 0; j < hidden; j++) {
    float y = (inst_load(x, base + j) - mean) * inv_std * inst_load(w, j);
    if (bias)
      y += inst_load(bias, j);
    inst_store(out, base + j, y);
  }
}

typedef void (*NormRowFn)(const AmkInstCall *call, int64_t base, int64_t hidden, float eps);

/* The checks, then `row` over every row of the input, or over the rows of
 * the window [m_off, m_off + M_tile) (rows of `hidden`). */
static int run_norm(const AmkInstCall *call, NormRowFn row) {
  int64_t hidden = 0; /* set by check_norm; gcc cannot tell once inlined */
  int rc = check_norm(call, &hidden);
  if (rc)
    return rc;
  int64_t first, end;
  if ((rc = inst_row_window(call, call->in[0].numel / hidden, &first, &end)))
    return rc;
  for (int64_t r = first; r < end; r++)
    row(call, r * hidden, hidden, call->p->eps.f);
  return AMK_INST_OK;
}

int amk_kernel_RMSNORM(const AmkInstCall *call) {
  return run_norm(call, rmsnorm_row);
}

int amk_kernel_LAYERNORM(const AmkInstCall *call) {
  return run_norm(call, layernorm_row);
}
