/* amk_inst_execute: the opcode dispatch, param decoding, and the element
 * loads and stores every kernel shares. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "amk/numerics.h"
#include "inst_internal.h"

/* ---- views --------------------------------------------------------------- */

AmkTensorView amk_tensor_view(void *data, AmkDType dtype, uint32_t rank,
                              const int64_t *shape) {
  AmkTensorView v = {.data = data, .dtype = dtype, .rank = rank, .numel = -1};
  if (rank > AMK_MAX_RANK)
    return v;
  int64_t numel = 1;
  for (uint32_t d = 0; d < rank; d++) {
    v.shape[d] = shape[d];
    if (shape[d] < 0 || (shape[d] > 0 && numel > INT64_MAX / shape[d]))
      return v;
    numel *= shape[d];
  }
  v.numel = numel;
  return v;
}

int64_t inst_width(const AmkTensorView *v) {
  return v->rank ? v->shape[v->rank - 1] : 1;
}

int64_t inst_nbytes(const AmkTensorView *v) {
  return amk_dtype_nbytes(v->dtype, v->numel);
}

/* ---- errors and params ----------------------------------------------------- */

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

static int fail_plain(char *err, size_t err_len, int status, const char *fmt,
                      ...) AMK_PRINTF(4, 5);
static int fail_plain(char *err, size_t err_len, int status, const char *fmt,
                      ...) {
  if (err && err_len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
  }
  return status;
}

int inst_require(const AmkInstCall *call, AmkParamField field) {
  if (amk_inst_param_has(call->p, field))
    return AMK_INST_OK;
  return inst_fail(call, AMK_INST_ERR_PARAM, "missing param '%s'",
                   amk_param_name(field));
}

int32_t inst_int_or(const AmkInstCall *call, AmkParamField field,
                    int32_t fallback) {
  if (!amk_inst_param_has(call->p, field))
    return fallback;
  return amk_inst_param_slot((AmkInstParams *)call->p, field)->i;
}

/* ---- element access ---------------------------------------------------------- */

bool inst_dtype_is_numeric(AmkDType d) {
  switch (d) {
  case AMK_DTYPE_F32:
  case AMK_DTYPE_F16:
  case AMK_DTYPE_BF16:
  case AMK_DTYPE_I32:
  case AMK_DTYPE_I8:
  case AMK_DTYPE_U8:
  case AMK_DTYPE_BOOL:
    return true;
  default:
    return false;
  }
}

bool inst_dtype_is_integer(AmkDType d) {
  return d == AMK_DTYPE_I32 || d == AMK_DTYPE_I8 || d == AMK_DTYPE_U8 ||
         d == AMK_DTYPE_BOOL;
}

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

float inst_load(const AmkTensorView *v, int64_t i) {
  switch (v->dtype) {
  case AMK_DTYPE_F32: {
    float x;
    memcpy(&x, (const char *)v->data + i * 4, 4);
    return x;
  }
  case AMK_DTYPE_F16: {
    uint16_t h;
    memcpy(&h, (const char *)v->data + i * 2, 2);
    return amk_f16_to_f32(h);
  }
  case AMK_DTYPE_BF16: {
    uint16_t h;
    memcpy(&h, (const char *)v->data + i * 2, 2);
    return amk_bf16_to_f32(h);
  }
  default:
    return (float)inst_load_int(v, i);
  }
}

void inst_load_row(const AmkTensorView *v, int64_t start, int64_t count, float *dst) {
  switch (v->dtype) {
  case AMK_DTYPE_F32:
    memcpy(dst, (const char *)v->data + start * 4, (size_t)count * 4);
    return;
  case AMK_DTYPE_BF16: {
    /* bf16 is the upper half of an fp32: widening is exact. */
    const unsigned char *src = (const unsigned char *)v->data + start * 2;
    for (int64_t k = 0; k < count; k++) {
      uint16_t h;
      memcpy(&h, src + k * 2, 2);
      uint32_t bits = (uint32_t)h << 16;
      memcpy(&dst[k], &bits, 4);
    }
    return;
  }
  default:
    for (int64_t k = 0; k < count; k++)
      dst[k] = inst_load(v, start + k);
    return;
  }
}

int64_t inst_load_int(const AmkTensorView *v, int64_t i) {
  switch (v->dtype) {
  case AMK_DTYPE_I32: {
    int32_t x;
    memcpy(&x, (const char *)v->data + i * 4, 4);
    return x;
  }
  case AMK_DTYPE_I8:
    return ((const int8_t *)v->data)[i];
  case AMK_DTYPE_U8:
    return ((const uint8_t *)v->data)[i];
  case AMK_DTYPE_BOOL:
    return ((const uint8_t *)v->data)[i] != 0;
  default:
    return 0; /* callers check the dtype first */
  }
}

/* Truncate toward zero into [lo, hi]; NaN becomes 0 (a float-to-int cast
 * out of range is undefined in C, so saturate first). */
static int64_t float_to_int(float x, int64_t lo, int64_t hi) {
  if (isnan(x))
    return 0;
  if (x <= (float)lo)
    return lo;
  if (x >= (float)hi)
    return hi;
  return (int64_t)x;
}

void inst_store(AmkTensorView *v, int64_t i, float x) {
  char *base = (char *)v->data;
  switch (v->dtype) {
  case AMK_DTYPE_F32:
    memcpy(base + i * 4, &x, 4);
    break;
  case AMK_DTYPE_F16: {
    uint16_t h = amk_f32_to_f16(x);
    memcpy(base + i * 2, &h, 2);
    break;
  }
  case AMK_DTYPE_BF16: {
    uint16_t h = amk_f32_to_bf16(x);
    memcpy(base + i * 2, &h, 2);
    break;
  }
  case AMK_DTYPE_I32: {
    int32_t n = (int32_t)float_to_int(x, INT32_MIN, INT32_MAX);
    memcpy(base + i * 4, &n, 4);
    break;
  }
  case AMK_DTYPE_I8:
    ((int8_t *)base)[i] = (int8_t)float_to_int(x, INT8_MIN, INT8_MAX);
    break;
  case AMK_DTYPE_U8:
    ((uint8_t *)base)[i] = (uint8_t)float_to_int(x, 0, UINT8_MAX);
    break;
  case AMK_DTYPE_BOOL:
    ((uint8_t *)base)[i] = x != 0.0f;
    break;
  default:
    break; /* callers check the dtype first */
  }
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

/* ---- dispatch ------------------------------------------------------------------ */

static const AmkKernelFn kernel_for_op[AMK_OP_COUNT] = {
#define X(name, code, text, mi, ma, no, req) [AMK_OP_##name] = amk_kernel_##name,
    AMK_OPS(X)
#undef X
};

/* ROPE takes an optional third input (precomputed inverse frequencies, for
 * llama3-scaled rope) beyond the table's two. */
static int max_inputs_of(AmkOp op) {
  if (op == AMK_OP_ROPE)
    return 3;
  return amk_op_info(op)->max_inputs;
}

static int check_view(const AmkInstCall *call, const AmkTensorView *v,
                      const char *role, uint32_t index) {
  if (v->rank > AMK_MAX_RANK)
    return inst_fail(call, AMK_INST_ERR_SHAPE, "%s %u has rank %u (max %d)",
                     role, index, v->rank, AMK_MAX_RANK);
  int64_t numel = 1;
  for (uint32_t d = 0; d < v->rank; d++) {
    if (v->shape[d] < 0 ||
        (v->shape[d] > 0 && numel > INT64_MAX / v->shape[d]))
      return inst_fail(call, AMK_INST_ERR_SHAPE, "%s %u has a bad dim %" PRId64,
                       role, index, v->shape[d]);
    numel *= v->shape[d];
  }
  if (numel != v->numel)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s %u: numel %" PRId64 " is not the product of its dims "
                     "(%" PRId64 ")",
                     role, index, v->numel, numel);
  if ((unsigned)v->dtype >= AMK_DTYPE_COUNT)
    return inst_fail(call, AMK_INST_ERR_DTYPE, "%s %u has an unknown dtype",
                     role, index);
  if (numel > 0 && !v->data)
    return inst_fail(call, AMK_INST_ERR_SHAPE, "%s %u has no data", role,
                     index);
  return AMK_INST_OK;
}

int amk_inst_execute(AmkOp op, const AmkInstParams *p,
                     const AmkTensorView *inputs, uint32_t n_inputs,
                     AmkTensorView *outputs, uint32_t n_outputs,
                     const AmkInstExtra *extra, char *err, size_t err_len) {
  static const AmkInstParams no_params;
  static const AmkInstExtra no_extra;
  AmkInstCall call = {.op = op,
                      .p = p ? p : &no_params,
                      .in = inputs,
                      .n_in = n_inputs,
                      .out = outputs,
                      .n_out = n_outputs,
                      .extra = extra ? extra : &no_extra,
                      .err = err,
                      .err_len = err_len};
  if (err && err_len)
    err[0] = '\0';
  if ((unsigned)op >= AMK_OP_COUNT)
    return fail_plain(err, err_len, AMK_INST_ERR_OPCODE, "unknown opcode %d",
                      (int)op);
  const AmkOpInfo *info = amk_op_info(op);
  int max_in = max_inputs_of(op);
  if ((int)n_inputs < info->min_inputs ||
      (max_in >= 0 && (int)n_inputs > max_in))
    return inst_fail(&call, AMK_INST_ERR_ARITY,
                     "takes %d to %d inputs, got %u", info->min_inputs,
                     max_in, n_inputs);
  if ((int)n_outputs != info->n_outputs)
    return inst_fail(&call, AMK_INST_ERR_ARITY, "takes %d outputs, got %u",
                     info->n_outputs, n_outputs);
  if ((n_inputs && !inputs) || (n_outputs && !outputs))
    return inst_fail(&call, AMK_INST_ERR_ARITY, "missing input/output array");
  for (uint32_t i = 0; i < n_inputs; i++) {
    int rc = check_view(&call, &inputs[i], "input", i);
    if (rc)
      return rc;
  }
  for (uint32_t i = 0; i < n_outputs; i++) {
    int rc = check_view(&call, &outputs[i], "output", i);
    if (rc)
      return rc;
  }
  return kernel_for_op[op](&call);
}
