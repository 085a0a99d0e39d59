/* ROPE: Llama rotate-half rotary embedding. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

#include "inst_internal.h"

/* inputs [x, positions(, inv_freq)]. x holds P rows (P = number of
 * positions), each a run of heads of head_dim; row p rotates by position p.
 * inv_freq[i] = 1 / theta^(i / half), in fp32, unless given as input 2 or
 * as extra->rope_inv_freq. With M_tile, only position rows
 * [m_off, m_off + M_tile). */
int amk_kernel_ROPE(const AmkInstCall *call) {
  int rc;
  if ((rc = inst_require(call, AMK_PARAM_head_dim)) ||
      (rc = inst_require(call, AMK_PARAM_theta)))
    return rc;
  const AmkTensorView *x = &call->in[0], *positions = &call->in[1];
  AmkTensorView *out = &call->out[0];
  int64_t head_dim = call->p->head_dim.i;
  if (head_dim <= 0 || head_dim % 2 != 0)
    return inst_fail(call, AMK_INST_ERR_PARAM,
                     "head_dim %" PRId64 " must be positive and even", head_dim);
  if ((rc = inst_require_numeric(call, x, "input")) ||
      (rc = inst_require_numeric(call, out, "output")) ||
      (rc = inst_require_integer(call, positions, "positions")) ||
      (rc = inst_require_same_numel(call, x, "input", out, "output")))
    return rc;
  int64_t n_pos = positions->numel;
  if (n_pos == 0 || x->numel % (n_pos * head_dim) != 0)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%" PRId64 " elements are not %" PRId64
                     " position rows of whole heads of %" PRId64,
                     x->numel, n_pos, head_dim);
  int64_t half = head_dim / 2;
  int64_t first_row, end_row;
  if ((rc = inst_row_window(call, n_pos, &first_row, &end_row)))
    return rc;
  const AmkTensorView *given_freq = call->n_in > 2 ? &call->in[2] : NULL;
  if (given_freq) {
    if ((rc = inst_require_numeric(call, given_freq, "inv_freq")))
      return rc;
    if (given_freq->numel != half)
      return inst_fail(call, AMK_INST_ERR_SHAPE,
                       "inv_freq has %" PRId64 " elements, want head_dim/2 = %" PRId64,
                       given_freq->numel, half);
  }
  float *inv_freq = malloc((size_t)half * sizeof *inv_freq);
  if (!inv_freq)
    return inst_fail(call, AMK_INST_ERR_NOMEM, "out of memory");
  float theta = call->p->theta.f;
  for (int64_t i = 0; i < half; i++) {
    if (given_freq)
      inv_freq[i] = inst_load(given_freq, i);
    else if (call->extra->rope_inv_freq)
      inv_freq[i] = call->extra->rope_inv_freq[i];
    else
      inv_freq[i] = 1.0f / powf(theta, (float)i / (float)half);
  }

  int64_t row_len = x->numel / n_pos;
  for (int64_t p = first_row; p < end_row; p++) {
    float pos = (float)inst_load_int(positions, p);
    for (int64_t head = 0; head < row_len / head_dim; head++) {
      int64_t base = p * row_len + head * head_dim;
      for (int64_t i = 0; i < half; i++) {
        float angle = pos * inv_freq[i];
        float c = cosf(angle), s = sinf(angle);
        float x1 = inst_load(x, base + i), x2 = inst_load(x, base + half + i);
        inst_store(out, base + i, x1 * c - x2 * s);
        inst_store(out, base + half + i, x2 * c + x1 * s);
      }
    }
  }
  free(inv_freq);
  return AMK_INST_OK;
}
