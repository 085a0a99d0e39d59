/* Rotary inverse frequencies (default and Llama-3 scaled). */
#include "amk/rope.h"

#include <math.h>

void amk_rope_inv_freq(const AmkRopeSpec *spec, double *out, int half) {
  const double two_pi = 6.283185307179586476925286766559;
  for (int i = 0; i < half; i++) {
    double exponent = (2.0 * i) / spec->head_dim;
    double inv_freq = 1.0 / pow(spec->theta, exponent);
    if (spec->kind == AMK_ROPE_LLAMA3) {
      /* Long wavelengths (low frequencies) are slowed by `factor`, short ones
       * kept, and the band between interpolated smoothly. */
      double low_freq_wavelen = spec->original_max_pos / spec->low_freq_factor;
      double high_freq_wavelen = spec->original_max_pos / spec->high_freq_factor;
      double wavelen = two_pi / inv_freq;
      if (wavelen > low_freq_wavelen) {
        inv_freq = inv_freq / spec->factor;
      } else if (wavelen >= high_freq_wavelen) {
        double smooth = (spec->original_max_pos / wavelen - spec->low_freq_factor) /
                        (spec->high_freq_factor - spec->low_freq_factor);
        inv_freq = (1.0 - smooth) * inv_freq / spec->factor + smooth * inv_freq;
      }
    }
    out[i] = inv_freq;
  }
}

bool amk_rope_spec_from_task(const AmkTask *task, AmkRopeSpec *out,
                             const char **why) {
  AmkRopeSpec spec = {.kind = AMK_ROPE_DEFAULT};
  int64_t head_dim;
  if (!amk_task_param_int(task, "head_dim", &head_dim) || head_dim <= 0 ||
      head_dim % 2 != 0 || head_dim > (1 << 20)) {
    *why = "ROPE needs a positive even integer head_dim";
    return false;
  }
  spec.head_dim = (int)head_dim;
  if (!amk_task_param_real(task, "theta", &spec.theta) || !(spec.theta > 1.0) ||
      !isfinite(spec.theta)) {
    *why = "ROPE needs a finite theta greater than 1";
    return false;
  }
  double values[4];
  const char *keys[4] = {AMK_ROPE_PARAM_FACTOR, AMK_ROPE_PARAM_LOW_FREQ_FACTOR,
                         AMK_ROPE_PARAM_HIGH_FREQ_FACTOR,
                         AMK_ROPE_PARAM_ORIGINAL_MAX_POS};
  int present = 0;
  for (int i = 0; i < 4; i++)
    present += amk_task_param_real(task, keys[i], &values[i]);
  if (present == 0) {
    *out = spec;
    return true;
  }
  if (present != 4) {
    *why = "llama3 ROPE needs all of factor, low_freq_factor, "
           "high_freq_factor and original_max_position_embeddings";
    return false;
  }
  spec.kind = AMK_ROPE_LLAMA3;
  spec.factor = values[0];
  spec.low_freq_factor = values[1];
  spec.high_freq_factor = values[2];
  spec.original_max_pos = values[3];
  if (!(spec.factor > 0.0) || !(spec.low_freq_factor > 0.0) ||
      !(spec.high_freq_factor > spec.low_freq_factor) ||
      !(spec.original_max_pos > 0.0) || !isfinite(spec.factor) ||
      !isfinite(spec.high_freq_factor) || !isfinite(spec.original_max_pos)) {
    *why = "llama3 ROPE needs factor > 0, 0 < low_freq_factor < "
           "high_freq_factor and original_max_position_embeddings > 0";
    return false;
  }
  *out = spec;
  return true;
}
