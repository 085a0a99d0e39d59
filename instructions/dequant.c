/* Weight-only quantized matrices (int8 / int4 with per-group scales) and
 * the DEQUANT op. */
#include <inttypes.h>
#include <stdlib.h>

#include "inst_internal.h"

int inst_quant_matrix(const AmkInstCall *call, const AmkTensorView *q,
                      const AmkTensorView *scales, const AmkTensorView *zeros,
                      int qdtype, int64_t cols, int64_t group,
                      InstQuantMatrix *m) {
  int rc;
  if (qdtype != AMK_QDTYPE_INT8 && qdtype != AMK_QDTYPE_INT4)
    return inst_fail(call, AMK_INST_ERR_PARAM,
                     "qdtype %d is neither int8 (6) nor int4 (7)", qdtype);
  if (cols <= 0 || group <= 0)
    return inst_fail(call, AMK_INST_ERR_PARAM,
                     "K %" PRId64 " and group %" PRId64 " must be positive",
                     cols, group);
  if ((rc = inst_require_numeric(call, scales, "scales")))
    return rc;
  int64_t n_groups = (cols + group - 1) / group;
  if (inst_width(scales) != n_groups)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "scales have %" PRId64 " columns, want ceil(K/group) = %" PRId64,
                     inst_width(scales), n_groups);
  int64_t rows = scales->numel / n_groups;
  if (zeros) {
    if ((rc = inst_require_numeric(call, zeros, "zero-points")) ||
        (rc = inst_require_same_numel(call, zeros, "zero-points", scales,
                                      "scales")))
      return rc;
  }
  int64_t row_bytes;
  if (qdtype == AMK_QDTYPE_INT8) {
    if (q->dtype != AMK_DTYPE_I8)
      return inst_fail(call, AMK_INST_ERR_DTYPE,
                       "int8 weights must be stored as i8, not %s",
                       amk_dtype_text_name(q->dtype));
    row_bytes = cols;
  } else {
    if (q->dtype != AMK_DTYPE_I4 && q->dtype != AMK_DTYPE_U8 &&
        q->dtype != AMK_DTYPE_I8)
      return inst_fail(call, AMK_INST_ERR_DTYPE,
                       "int4 weights must be packed bytes (i4, u8 or i8), not %s",
                       amk_dtype_text_name(q->dtype));
    row_bytes = (cols + 1) / 2;
  }
  if (inst_nbytes(q) != rows * row_bytes)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "quantized weight has %" PRId64 " bytes, want %" PRId64
                     " rows x %" PRId64 " bytes",
                     inst_nbytes(q), rows, row_bytes);
  *m = (InstQuantMatrix){.q = q,
                         .scales = scales,
                         .zeros = zeros,
                         .qdtype = qdtype,
                         .rows = rows,
                         .cols = cols,
                         .group = group,
                         .n_groups = n_groups,
                         .row_bytes = row_bytes};
  return AMK_INST_OK;
}

/* One group's scale (and zero-point) is read once, then its columns are
 * decoded in a tight loop: the same values as (q - zero) * scale per
 * element, without a dtype dispatch per weight. */
void inst_quant_row_range(const InstQuantMatrix *m, int64_t row, int64_t begin, int64_t end,
                          float *dst) {
  const uint8_t *bytes = (const uint8_t *)m->q->data + row * m->row_bytes;
  for (int64_t g = begin / m->group; g < m->n_groups && g * m->group < end; g++) {
    int64_t k0 = g * m->group > begin ? g * m->group : begin;
    int64_t k1 = (g + 1) * m->group < end ? (g + 1) * m->group : end;
    int64_t at = row * m->n_groups + g;
    float scale = inst_load(m->scales, at);
    float zero = m->zeros ? inst_load(m->zeros, at) : 0.0f;
    if (m->qdtype == AMK_QDTYPE_INT8) {
      for (int64_t k = k0; k < k1; k++)
        dst[k - begin] = ((float)(int8_t)bytes[k] - zero) * scale;
    } else {
      for (int64_t k = k0; k < k1; k++) {
        uint8_t byte = bytes[k / 2];
        int q = ((k & 1) ? byte >> 4 : byte & 0xF) - 8; /* stored as q + 8 */
        dst[k - begin] = ((float)q - zero) * scale;
      }
    }
  }
}

void inst_quant_row(const InstQuantMatrix *m, int64_t row, float *dst) {
  inst_quant_row_range(m, row, 0, m->cols, dst);
}

/* inputs [q, scales(, zeros)] -> output [rows, K] in the output's dtype,
 * K being the output's last dim. */
int amk_kernel_DEQUANT(const AmkInstCall *call) {
  int rc;
  if ((rc = inst_require(call, AMK_PARAM_qdtype)) ||
      (rc = inst_require(call, AMK_PARAM_group)))
    return rc;
  AmkTensorView *out = &call->out[0];
  if ((rc = inst_require_numeric(call, out, "output")))
    return rc;
  InstQuantMatrix m;
  int64_t cols = inst_width(out);
  if ((rc = inst_quant_matrix(call, &call->in[0], &call->in[1],
                              call->n_in > 2 ? &call->in[2] : NULL,
                              call->p->qdtype.i, cols, call->p->group.i, &m)))
    return rc;
  if (out->numel != m.rows * cols)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "output has %" PRId64 " elements, want %" PRId64 " x %" PRId64,
                     out->numel, m.rows, cols);
  float *row = malloc((size_t)cols * sizeof *row);
  if (!row)
    return inst_fail(call, AMK_INST_ERR_NOMEM, "out of memory");
  for (int64_t r = 0; r < m.rows; r++) {
    inst_quant_row(&m, r, row);
    for (int64_t k = 0; k < cols; k++)
      inst_store(out, r * cols + k, row[k]);
  }
  free(row);
  return AMK_INST_OK;
}
