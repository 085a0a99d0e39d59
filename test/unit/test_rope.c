/* Rotary inverse frequencies against values worked out by hand. */
#include <math.h>

#include "amk/rope.h"
#include "unit.h"

static int close_to(double got, double want) {
  return fabs(got - want) <= 1e-12 * fabs(want);
}

int main(void) {
  UnitCounts c = {0, 0};
  double out[4];

  /* Default: theta^(-2i/8) with theta = 10^4 is 10^-i. */
  AmkRopeSpec plain = {.kind = AMK_ROPE_DEFAULT, .head_dim = 8, .theta = 10000.0};
  amk_rope_inv_freq(&plain, out, 4);
  CHECK(&c, close_to(out[0], 1.0));
  CHECK(&c, close_to(out[1], 0.1));
  CHECK(&c, close_to(out[2], 0.01));
  CHECK(&c, close_to(out[3], 0.001));

  /* head_dim 4, theta 100: 100^0 = 1, 100^(-1/2) = 0.1. */
  AmkRopeSpec small = {.kind = AMK_ROPE_DEFAULT, .head_dim = 4, .theta = 100.0};
  amk_rope_inv_freq(&small, out, 2);
  CHECK(&c, close_to(out[0], 1.0));
  CHECK(&c, close_to(out[1], 0.1));

  /* llama3, factor 8, low 1, high 4, original 64: wavelengths above 64 are
   * slowed 8x, below 16 kept, between smoothed.
   *   i=0: wavelen 2*pi      < 16  -> 1
   *   i=1: wavelen 20*pi = 62.83 in [16, 64]:
   *        s = (64 / (20*pi) - 1) / 3 = 0.0061972119293...
   *        0.1/8 * (1 - s) + 0.1 * s = 0.0125 + 0.0875 s = 0.01304225604382
   *   i=2: wavelen 200*pi    > 64  -> 0.01 / 8  = 0.00125
   *   i=3: wavelen 2000*pi   > 64  -> 0.001 / 8 = 0.000125 */
  AmkRopeSpec l3 = {.kind = AMK_ROPE_LLAMA3, .head_dim = 8, .theta = 10000.0,
                    .factor = 8.0, .low_freq_factor = 1.0,
                    .high_freq_factor = 4.0, .original_max_pos = 64.0};
  amk_rope_inv_freq(&l3, out, 4);
  CHECK(&c, close_to(out[0], 1.0));
  CHECK(&c, fabs(out[1] - 0.01304225604382) < 1e-13);
  CHECK(&c, close_to(out[2], 0.00125));
  CHECK(&c, close_to(out[3], 0.000125));

  /* Params of a ROPE task. */
  AmkModule *m = amk_module_new();
  AmkTask *t = amk_module_add_task(m);
  t->op = AMK_OP_ROPE;
  const char *why = NULL;
  AmkRopeSpec spec;
  CHECK(&c, !amk_rope_spec_from_task(t, &spec, &why) && why != NULL);
  amk_task_set_param(m, t, "head_dim", amk_value_int(8));
  amk_task_set_param(m, t, "theta", amk_value_float(10000.0));
  CHECK(&c, amk_rope_spec_from_task(t, &spec, &why));
  CHECK(&c, spec.kind == AMK_ROPE_DEFAULT && spec.head_dim == 8 &&
                spec.theta == 10000.0);
  amk_task_set_param(m, t, AMK_ROPE_PARAM_FACTOR, amk_value_float(8.0));
  why = NULL;
  CHECK(&c, !amk_rope_spec_from_task(t, &spec, &why) && why != NULL);
  amk_task_set_param(m, t, AMK_ROPE_PARAM_LOW_FREQ_FACTOR, amk_value_float(1.0));
  amk_task_set_param(m, t, AMK_ROPE_PARAM_HIGH_FREQ_FACTOR, amk_value_float(4.0));
  amk_task_set_param(m, t, AMK_ROPE_PARAM_ORIGINAL_MAX_POS, amk_value_int(64));
  CHECK(&c, amk_rope_spec_from_task(t, &spec, &why));
  CHECK(&c, spec.kind == AMK_ROPE_LLAMA3 && spec.factor == 8.0 &&
                spec.original_max_pos == 64.0);
  amk_task_set_param(m, t, AMK_ROPE_PARAM_HIGH_FREQ_FACTOR, amk_value_float(0.5));
  CHECK(&c, !amk_rope_spec_from_task(t, &spec, &why));
  amk_task_set_param(m, t, "head_dim", amk_value_int(7));
  CHECK(&c, !amk_rope_spec_from_task(t, &spec, &why));
  amk_module_free(m);
  return unit_finish("test_rope", &c);
}
