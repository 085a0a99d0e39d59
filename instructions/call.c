/* What every kernel does with its call: fail with "<op>: <reason>", read
 * its params, check its views' dtypes and sizes, find its column window.
 * Used by the kernel files and the dispatcher, and uses none of them. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "inst_internal.h"

/* ---- errors ------------------------------------------------------------------- */

static int format_error(char *err, size_t err_len, AmkOp op, const char *fmt,
                        va_list ap) {
  if (!err || err_len == 0)
    return 0;
  const char *name = (unsigned)op < AMK_OP_COUNT ? amk_op_info(op)->text_name
                                                 : "instruction";
  int used = snprintf(err, err_len, "%s: ", name);
  if (used >= 0 && (size_t)used < err_len)
    vsnprintf(err + used, err_len - (size_t)used, fmt, ap);
  return 0;
}

int inst_fail(const AmkInstCall *call, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  format_error(call->err, call->err_len, call->op, fmt, ap);
  va_end(ap);
  return status;
}

/* ---- params -------------------------------------------------------------------- */

/* An 'i' field's value (the slot of a field by the table's order). */
static int32_t param_int(const AmkInstParams *p, AmkParamField field) {
  switch (field) {
#define X(name, type)                                                          \
  case AMK_PARAM_##name:                                                       \
    return p->name.i;
    AMK_PARAMS(X)
#undef X
  case AMK_PARAM_COUNT:
    break;
  }
  return 0;
}

int inst_require(const AmkInstCall *call, AmkParamField field) {
  if (amk_inst_param_has(call->p, field))
    return AMK_INST_OK;
  return inst_fail(call, AMK_INST_ERR_PARAM, "missing param '%s'",
                   amk_param_name(field));
}

int inst_require_all(const AmkInstCall *call, const AmkParamField *fields, size_t n) {
  int rc;
  for (size_t i = 0; i < n; i++)
    if ((rc = inst_require(call, fields[i])))
      return rc;
  return AMK_INST_OK;
}

int32_t inst_int_or(const AmkInstCall *call, AmkParamField field,
                    int32_t fallback) {
  if (!amk_inst_param_has(call->p, field))
    return fallback;
  return param_int(call->p, field);
}

/* ---- checks on views ---------------------------------------------------------- */

static const char *dtype_name(AmkDType d) {
  return (unsigned)d < AMK_DTYPE_COUNT ? amk_dtype_text_name(d) : "unknown";
}

int inst_require_numeric(const AmkInstCall *call, const AmkTensorView *v,
                         const char *role) {
  if (inst_dtype_is_numeric(v->dtype))
    return AMK_INST_OK;
  return inst_fail(call, AMK_INST_ERR_DTYPE, "%s has unsupported dtype %s",
                   role, dtype_name(v->dtype));
}

int inst_require_integer(const AmkInstCall *call, const AmkTensorView *v,
                         const char *role) {
  if (inst_dtype_is_integer(v->dtype))
    return AMK_INST_OK;
  return inst_fail(call, AMK_INST_ERR_DTYPE,
                   "%s must hold integers, not %s", role, dtype_name(v->dtype));
}

int inst_require_same_numel(const AmkInstCall *call, const AmkTensorView *a,
                            const char *a_role, const AmkTensorView *b,
                            const char *b_role) {
  if (a->numel == b->numel)
    return AMK_INST_OK;
  return inst_fail(call, AMK_INST_ERR_SHAPE,
                   "%s has %" PRId64 " elements but %s has %" PRId64, a_role,
                   a->numel, b_role, b->numel);
}

int inst_require_numeric_like(const AmkInstCall *call, const char *role, const char *a_role,
                              const AmkTensorView *ref, const char *ref_role) {
  int rc;
  if ((rc = inst_require_numeric(call, &call->out[0], "output")))
    return rc;
  for (uint32_t i = 0; i < call->n_in; i++)
    if ((rc = inst_require_numeric(call, &call->in[i], role)) ||
        (rc = inst_require_same_numel(call, &call->in[i], a_role, ref, ref_role)))
      return rc;
  return AMK_INST_OK;
}

int inst_columns(const AmkInstCall *call, const AmkTensorView *out,
                 InstColumns *cols) {
  cols->width = inst_width(out);
  cols->rows = cols->width ? out->numel / cols->width : 0;
  cols->col_begin = 0;
  cols->col_end = cols->width;
  if (!amk_inst_param_has(call->p, AMK_PARAM_N_tile))
    return AMK_INST_OK;
  int64_t n_off = inst_int_or(call, AMK_PARAM_n_off, 0);
  int64_t n_tile = call->p->N_tile.i;
  if (n_off < 0 || n_tile < 0 || n_off + n_tile > cols->width)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "column tile [%" PRId64 ", %" PRId64
                     ") is outside the output's %" PRId64 " columns",
                     n_off, n_off + n_tile, cols->width);
  cols->col_begin = n_off;
  cols->col_end = n_off + n_tile;
  return AMK_INST_OK;
}

int inst_row_window(const AmkInstCall *call, int64_t total, int64_t *begin,
                    int64_t *end) {
  *begin = 0;
  *end = total;
  if (!amk_inst_param_has(call->p, AMK_PARAM_M_tile)) {
    if (amk_inst_param_has(call->p, AMK_PARAM_m_off))
      return inst_fail(call, AMK_INST_ERR_SHAPE,
                       "m_off without M_tile (a row window needs both)");
    return AMK_INST_OK;
  }
  int64_t m_off = inst_int_or(call, AMK_PARAM_m_off, 0);
  int64_t m_tile = call->p->M_tile.i;
  if (m_off < 0 || m_tile < 1 || m_off + m_tile > total)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "row window [%" PRId64 ", %" PRId64
                     ") is outside the %" PRId64 " rows",
                     m_off, m_off + m_tile, total);
  *begin = m_off;
  *end = m_off + m_tile;
  return AMK_INST_OK;
}
