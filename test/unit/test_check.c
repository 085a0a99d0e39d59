/* amk-run --check's comparison of a backend's logits with the reference's. */
#include "amk/backend.h"
#include "unit.h"

int main(void) {
  UnitCounts c = {0};
  const float ref[4] = {1.0f, 2.5f, 2.49f, -3.0f};

  /* f32: within 1e-4 of the scale (3.0) passes, beyond fails. */
  const float close[4] = {1.0f, 2.5f + 2e-4f, 2.49f, -3.0f};
  AmkLogitCheck r = amk_check_logits(ref, close, 4, false);
  CHECK(&c, r.pass && r.scale == 3.0 && r.ref_token == 1 && r.gpu_token == 1);
  const float off[4] = {1.0f, 2.5f, 2.49f, -3.0f + 4e-4f};
  CHECK(&c, !amk_check_logits(ref, off, 4, false).pass);

  /* bf16: same greedy token and small differences pass. */
  const float small[4] = {1.02f, 2.52f, 2.47f, -3.01f};
  CHECK(&c, amk_check_logits(ref, small, 4, true).pass);
  /* A swap of two tokens the reference scores 0.01 apart, with differences
   * of 0.02: rounding can explain it. */
  const float swapped[4] = {1.0f, 2.49f, 2.51f, -3.0f};
  r = amk_check_logits(ref, swapped, 4, true);
  CHECK(&c, r.pass && r.ref_token == 1 && r.gpu_token == 2);
  /* The same swap with the reference 0.5 apart cannot come from rounding of
   * 0.02-sized differences. */
  const float ref_wide[4] = {1.0f, 2.5f, 2.0f, -3.0f};
  const float swapped_wide[4] = {1.0f, 2.48f, 2.52f, -3.0f};
  CHECK(&c, !amk_check_logits(ref_wide, swapped_wide, 4, true).pass);
  /* Differences beyond 5% of the scale fail even with the same token. */
  const float far[4] = {1.3f, 2.5f, 2.49f, -3.0f};
  CHECK(&c, !amk_check_logits(ref, far, 4, true).pass);
  /* A NaN is never a pass. */
  const float nan_logits[4] = {1.0f, 2.5f, 0.0f / 0.0f, -3.0f};
  CHECK(&c, !amk_check_logits(ref, nan_logits, 4, false).pass);
  CHECK(&c, !amk_check_logits(ref, nan_logits, 4, true).pass);
  /* Non-finite logits are counted on each side; more on the engine's side
   * fails even where the difference would pass. */
  AmkLogitCheck nf = amk_check_logits(ref, nan_logits, 4, true);
  CHECK(&c, nf.ref_nonfinite == 0 && nf.got_nonfinite == 1);
  const float inf_ref[4] = {1.0f, 1.0f / 0.0f, 0.0f, -3.0f};
  const float inf_got[4] = {1.0f, 1.0f / 0.0f, 0.0f, -3.0f};
  AmkLogitCheck both = amk_check_logits(inf_ref, inf_got, 4, false);
  CHECK(&c, both.ref_nonfinite == 1 && both.got_nonfinite == 1);
  CHECK(&c, amk_count_nonfinite(nan_logits, 4) == 1 && amk_count_nonfinite(ref, 4) == 0 &&
                amk_count_nonfinite(inf_got, 4) == 1);
  return unit_finish("test_check", &c);
}
