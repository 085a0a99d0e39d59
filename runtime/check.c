/* Comparing an engine's logits with the reference VM's (amk-run --check). */
#include <math.h>
#include <stddef.h>

#include "amk/engine.h"

static int32_t argmax_of(const float *v, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; i++)
    if (v[i] > v[best] || (isnan(v[i]) && !isnan(v[best])))
      best = i;
  return (int32_t)best;
}

/* f32 programs: max |gpu - ref| <= 1e-4 * max(1, max |ref|).
 * Lower precision: the logits agree within 5% of the scale (the two sum in
 * different orders, and bf16 rounding between ops amplifies that), and the
 * greedy tokens are equal, unless the reference scores the two tokens closer
 * than twice the largest difference measured at this step: such a pair can
 * swap order through rounding alone, while a wider gap cannot, so a swap
 * there is a failure. */
AmkLogitCheck amk_check_logits(const float *ref, const float *gpu, size_t n, bool low_precision) {
  AmkLogitCheck r = {0};
  for (size_t i = 0; i < n; i++) {
    r.ref_nonfinite += !isfinite(ref[i]);
    r.got_nonfinite += !isfinite(gpu[i]);
    double d = fabs((double)gpu[i] - (double)ref[i]);
    if (isnan(d))
      d = INFINITY;
    if (d > r.max_abs)
      r.max_abs = d;
    if (fabs((double)ref[i]) > r.scale)
      r.scale = fabs((double)ref[i]);
  }
  r.ref_token = argmax_of(ref, n);
  r.gpu_token = argmax_of(gpu, n);
  double scale = r.scale > 1 ? r.scale : 1;
  if (low_precision)
    r.pass = r.max_abs <= 0.05 * scale &&
             (r.ref_token == r.gpu_token ||
              fabs((double)ref[r.ref_token] - (double)ref[r.gpu_token]) <= 2 * r.max_abs);
  else
    r.pass = r.max_abs <= 1e-4 * scale;
  if (r.got_nonfinite > r.ref_nonfinite)
    r.pass = false;
  return r;
}


size_t amk_count_nonfinite(const float *logits, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += !isfinite(logits[i]);
  return bad;
}
