/* NOP, COPY, ADD, MUL, SILU_MUL, GELU, SOFTMAX. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "inst_internal.h"

int amk_kernel_NOP(const AmkInstCall *call) {
  (void)call;
  return AMK_INST_OK;
}

/* Same dtype: a byte copy (exact for every dtype, packed ones included).
 * Otherwise each element goes through fp32 to the output dtype. */
int amk_kernel_COPY(const AmkInstCall *call) {
  const AmkTensorView *src = &call->in[0];
  AmkTensorView *dst = &call->out[0];
  int rc = inst_require_same_numel(call, src, "input", dst, "output");
  if (rc)
    return rc;
  if (src->dtype == dst->dtype) {
    if (src->data != dst->data)
      memmove(dst->data, src->data, (size_t)inst_nbytes(src));
    return AMK_INST_OK;
  }
  if ((rc = inst_require_numeric(call, src, "input")) ||
      (rc = inst_require_numeric(call, dst, "output")))
    return rc;
  for (int64_t i = 0; i < src->numel; i++)
    inst_store(dst, i, inst_load(src, i));
  return AMK_INST_OK;
}

typedef float (*BinaryFn)(float a, float b);

static float add_f32(float a, float b) { return a + b; }
static float mul_f32(float a, float b) { return a * b; }
/* silu(g) * u with silu(g) = g / (1 + exp(-g)). */
static float silu_mul_f32(float gate, float up) {
  return gate / (1.0f + expf(-gate)) * up;
}

/* out[i] = fn(a[i], b[i]) over the output's column window (inst_columns);
 * all three views share one element count and so one row layout. */
static int run_binary(const AmkInstCall *call, BinaryFn fn) {
  const AmkTensorView *a = &call->in[0], *b = &call->in[1];
  AmkTensorView *out = &call->out[0];
  int rc;
  if ((rc = inst_require_numeric(call, a, "input 0")) ||
      (rc = inst_require_numeric(call, b, "input 1")) ||
      (rc = inst_require_numeric(call, out, "output")) ||
      (rc = inst_require_same_numel(call, a, "input 0", out, "output")) ||
      (rc = inst_require_same_numel(call, b, "input 1", out, "output")))
    return rc;
  InstColumns cols;
  if ((rc = inst_columns(call, out, &cols)))
    return rc;
  for (int64_t r = 0; r < cols.rows; r++)
    for (int64_t c = cols.col_begin; c < cols.col_end; c++) {
      int64_t i = r * cols.width + c;
      inst_store(out, i, fn(inst_load(a, i), inst_load(b, i)));
    }
  return AMK_INST_OK;
}

int amk_kernel_ADD(const AmkInstCall *call) {
  return run_binary(call, add_f32);
}

int amk_kernel_SILU_MUL(const AmkInstCall *call) {
  return run_binary(call, silu_mul_f32);
}

/* One input and one output, numeric and of one element count. */
static int require_unary(const AmkInstCall *call) {
  const AmkTensorView *x = &call->in[0];
  AmkTensorView *out = &call->out[0];
  int rc;
  if ((rc = inst_require_numeric(call, x, "input")) ||
      (rc = inst_require_numeric(call, out, "output")) ||
      (rc = inst_require_same_numel(call, x, "input", out, "output")))
    return rc;
  return AMK_INST_OK;
}

typedef float (*UnaryFn)(float x, float arg);

static float scale_f32(float x, float scale) { return x * scale; }
/* Exact GELU: x * 0.5 * (1 + erf(x / sqrt(2))); it takes no argument. */
static float gelu_f32(float x, float unused) {
  (void)unused;
  const float inv_sqrt2 = 0.70710678118654752440f;
  return x * 0.5f * (1.0f + erff(x * inv_sqrt2));
}

/* out[i] = fn(x[i], arg) over the output's column window (inst_columns). */
static int run_unary(const AmkInstCall *call, UnaryFn fn, float arg) {
  const AmkTensorView *x = &call->in[0];
  AmkTensorView *out = &call->out[0];
  InstColumns cols;
  int rc;
  if ((rc = require_unary(call)) || (rc = inst_columns(call, out, &cols)))
    return rc;
  for (int64_t r = 0; r < cols.rows; r++)
    for (int64_t c = cols.col_begin; c < cols.col_end; c++) {
      int64_t i = r * cols.width + c;
      inst_store(out, i, fn(inst_load(x, i), arg));
    }
  return AMK_INST_OK;
}

/* Two inputs: elementwise product. One input: x * scale (scale 1 when not
 * given). */
int amk_kernel_MUL(const AmkInstCall *call) {
  if (call->n_in == 2)
    return run_binary(call, mul_f32);
  float scale =
      amk_inst_param_has(call->p, AMK_PARAM_scale) ? call->p->scale.f : 1.0f;
  return run_unary(call, scale_f32, scale);
}

/* The tanh approximation (torch's gelu(approximate="tanh"), transformers'
 * gelu_pytorch_tanh): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static float gelu_tanh_f32(float x, float unused) {
  (void)unused;
  const float sqrt_2_over_pi = 0.79788456080286535588f, kappa = 0.044715f;
  float inner = sqrt_2_over_pi * (x + kappa * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}

/* Exact GELU, or with flags bit AMK_FLAG_GELU_TANH the tanh approximation. */
int amk_kernel_GELU(const AmkInstCall *call) {
  bool tanh_form = (inst_int_or(call, AMK_PARAM_flags, 0) & AMK_FLAG_GELU_TANH) != 0;
  return run_unary(call, tanh_form ? gelu_tanh_f32 : gelu_f32, 0.0f);
}

/* Softmax along `dim` (default the last): max subtraction, then
 * exp(x - max) / sum, all fp32, summed in ascending index order. The
 * exponentials are recomputed rather than stored, so the kernel needs no
 * scratch and may run in place. */
int amk_kernel_SOFTMAX(const AmkInstCall *call) {
  const AmkTensorView *x = &call->in[0];
  AmkTensorView *out = &call->out[0];
  int rc = require_unary(call);
  if (rc)
    return rc;
  if (x->numel == 0)
    return AMK_INST_OK;
  int64_t rank = x->rank ? x->rank : 1;
  int64_t dim = inst_int_or(call, AMK_PARAM_dim, -1);
  if (dim < 0)
    dim += rank;
  if (dim < 0 || dim >= rank)
    return inst_fail(call, AMK_INST_ERR_PARAM,
                     "dim %" PRId32 " is outside rank %" PRId64,
                     inst_int_or(call, AMK_PARAM_dim, -1), rank);
  int64_t len = x->rank ? x->shape[dim] : 1;
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < (int64_t)x->rank; d++)
    inner *= x->shape[d];
  int64_t outer = x->numel / (len * inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      int64_t base = o * len * inner + in;
      float max = -INFINITY;
      for (int64_t j = 0; j < len; j++) {
        float v = inst_load(x, base + j * inner);
        if (isnan(v) || v > max)
          max = v; /* a NaN propagates to the whole row, as in torch */
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < len; j++)
        sum += expf(inst_load(x, base + j * inner) - max);
      for (int64_t j = 0; j < len; j++) {
        int64_t i = base + j * inner;
        inst_store(out, i, expf(inst_load(x, i) - max) / sum);
      }
    }
  return AMK_INST_OK;
}
