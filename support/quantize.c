/* Weight-only round-to-nearest quantization of one row (amk/quantize.h). */
#include "amk/quantize.h"

#include <math.h>
#include <string.h>

#include "amk/numerics.h"

/* The reference keeps every scale at least this, so an all-zero group
 * divides by something (its weights stay 0). */
#define MIN_SCALE 1e-8f

int amk_quant_qmax(int bits) { return bits == 8 ? 127 : bits == 4 ? 7 : 0; }

int64_t amk_quant_row_bytes(int bits, int64_t cols) { return bits == 4 ? (cols + 1) / 2 : cols; }

int64_t amk_quant_groups(int64_t cols, int64_t group) { return (cols + group - 1) / group; }

bool amk_quantize_row(const float *w, int64_t cols, int bits, int64_t group, uint8_t *q,
                      uint16_t *scales) {
  const int qmax = amk_quant_qmax(bits);
  /* int4 has one more level below zero than above it. */
  const float lo = bits == 4 ? (float)(-qmax - 1) : (float)-qmax, hi = (float)qmax;
  if (bits == 4)
    memset(q, 0, (size_t)amk_quant_row_bytes(bits, cols));
  for (int64_t g0 = 0, g = 0; g0 < cols; g0 += group, g++) {
    int64_t g1 = g0 + group < cols ? g0 + group : cols;
    float absmax = 0.0f;
    for (int64_t k = g0; k < g1; k++) {
      if (!isfinite(w[k]))
        return false;
      float a = fabsf(w[k]);
      if (a > absmax)
        absmax = a;
    }
    float scale = absmax / (float)qmax;
    if (scale < MIN_SCALE)
      scale = MIN_SCALE;
    scales[g] = amk_f32_to_f16(scale);
    if (!isfinite(amk_f16_to_f32(scales[g])))
      return false;
    for (int64_t k = g0; k < g1; k++) {
      float level = rintf(w[k] / scale); /* ties to even, as torch.round */
      level = level < lo ? lo : level > hi ? hi : level;
      int v = (int)level;
      if (bits == 8)
        q[k] = (uint8_t)(int8_t)v;
      else
        q[k / 2] |= (uint8_t)((v + 8) << ((k & 1) * 4));
    }
  }
  return true;
}
