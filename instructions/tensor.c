/* Tensor views and element access for the CPU kernels: building a view,
 * its width and size, the dtypes the kernels read, and the exact widening
 * loads and rounding stores. Nothing here reports an error, so every
 * kernel file (and the dispatcher) builds on it without using each other. */
#include <math.h>
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

/* ---- dtypes and elements --------------------------------------------------- */

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
