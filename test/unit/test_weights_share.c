/* amk_weights_source_in: where a prefill program's weight lies in the
 * decode program's buffers (the rule both the host's amk_weights_share and
 * the CUDA engine's device sharing use), and amk_engine_create's check of
 * share_with.
 *
 *   test_weights_share DECODE_FUSED.amkir PREFILL.amkir
 *
 * DECODE_FUSED is llama-tiny fused (q|k|v and gate|up joined), PREFILL its
 * prefill program of 4 rows (unfused). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/engine.h"
#include "amk/fileio.h"
#include "amk/io.h"
#include "amk/plan.h"
#include "amk/vm.h"
#include "amk/weights.h"
#include "unit.h"
#include "unit_program.h"

int main(int argc, char **argv) {
  UnitCounts c = {0};
  if (argc != 3) {
    fprintf(stderr, "usage: test_weights_share DECODE_FUSED.amkir PREFILL.amkir\n");
    return 2;
  }
  AmkDiagEngine *diag = amk_diag_new(stderr);
  AmkModule *dm = unit_load_program(argv[1]), *pm = unit_load_program(argv[2]);
  CHECK(&c, dm && pm);
  AmkPlan *dp = dm ? amk_plan_build(dm, NULL, diag) : NULL;
  AmkPlan *pp = pm ? amk_plan_build(pm, NULL, diag) : NULL;
  CHECK(&c, dp && pp);
  if (dp && pp) {
    int64_t off = -1;
    /* q, k, v of layer 0 are rows of the joined qkv buffer: q [64, 64],
     * k and v [32, 64] f32, so k starts 64*64*4 bytes in, v 32*64*4 later. */
    int32_t qkv = unit_plan_buffer(dp, "L0.qkv_proj.w");
    CHECK(&c, qkv >= 0);
    CHECK(&c, amk_weights_source_in(pp, (uint32_t)unit_plan_buffer(pp, "L0.q_proj.w"), dp, &off) ==
                  qkv && off == 0);
    CHECK(&c, amk_weights_source_in(pp, (uint32_t)unit_plan_buffer(pp, "L0.k_proj.w"), dp, &off) ==
                  qkv && off == 64 * 64 * 4);
    CHECK(&c, amk_weights_source_in(pp, (uint32_t)unit_plan_buffer(pp, "L0.v_proj.w"), dp, &off) ==
                  qkv && off == 64 * 64 * 4 + 32 * 64 * 4);
    /* up_proj is the second half of gate|up [320, 64]. */
    int32_t gu = unit_plan_buffer(dp, "L1.gate_up_proj.w");
    CHECK(&c, amk_weights_source_in(pp, (uint32_t)unit_plan_buffer(pp, "L1.up_proj.w"), dp, &off) ==
                  gu && off == 160 * 64 * 4);
    /* A weight of the same source and shape: offset 0 in that buffer. */
    CHECK(&c, amk_weights_source_in(pp, (uint32_t)unit_plan_buffer(pp, "lm_head.w"), dp, &off) ==
                  unit_plan_buffer(dp, "lm_head.w") && off == 0);
    /* Not loaded from a checkpoint: the synthetic row id, activations, KV
     * caches; an index past the end. */
    CHECK(&c, amk_weights_source_in(pp, (uint32_t)unit_plan_buffer(pp, "last_row"), dp, &off) < 0);
    CHECK(&c, amk_weights_source_in(pp, (uint32_t)unit_plan_buffer(pp, "L0.q"), dp, &off) < 0);
    CHECK(&c, amk_weights_source_in(pp, (uint32_t)unit_plan_buffer(pp, "L0.kcache"), dp, &off) < 0);
    CHECK(&c, amk_weights_source_in(pp, pp->n_buffers, dp, &off) < 0);

    /* Borrowed random bytes are the lender's rows (made when first asked
     * for), and a borrowed slice has no random rule of its own (an engine
     * filling it on the device by the rule would fill the wrong rows). */
    AmkWeights *lender = amk_weights_random(dp, 3, diag);
    AmkWeights *borrower = lender ? amk_weights_share(pp, lender, diag) : NULL;
    CHECK(&c, borrower != NULL);
    if (borrower) {
      uint32_t k_proj = (uint32_t)unit_plan_buffer(pp, "L0.k_proj.w");
      AmkRandomRule rule;
      CHECK(&c, !amk_weights_random_rule(borrower, k_proj, &rule));
      CHECK(&c, amk_weights_random_rule(lender, (uint32_t)qkv, &rule));
      size_t n = 0, whole = 0;
      const char *got = amk_weights_data(borrower, k_proj, &n);
      const char *rows = amk_weights_data(lender, (uint32_t)qkv, &whole);
      CHECK(&c, got && rows && n == 32 * 64 * 4 && whole == 128 * 64 * 4 &&
                    memcmp(got, rows + 64 * 64 * 4, n) == 0);
    }
    amk_weights_free(borrower);
    amk_weights_free(lender);

    /* share_with must be an engine of the same kind. */
    AmkWeights *w = amk_weights_random(dp, 1, diag);
    AmkEngineOptions opt = amk_engine_options_default();
    opt.threads = 1;
    AmkEngine *decode = w ? amk_engine_create(amk_vm_engine(), dp, w, &opt, diag) : NULL;
    CHECK(&c, decode != NULL);
    if (decode) {
      AmkDiagEngine *cap = amk_diag_new(stderr);
      amk_diag_set_capture(cap, 1);
      opt.share_with = decode;
      opt.tp_plans = (const AmkPlan *const *)&dp;
      opt.tp_weights = (const AmkWeights *const *)&w;
      opt.tp_size = 1;
      CHECK(&c, amk_engine_create(amk_vm_group_engine(), dp, w, &opt, cap) == NULL);
      CHECK(&c, amk_diag_captured_count(cap) == 1 &&
                    strstr(amk_diag_captured(cap, 0)->message,
                           "cannot use the device copies of a cpu engine") != NULL);
      amk_diag_free(cap);
      /* The same kind is accepted (the CPU VM borrows otherwise). */
      opt.tp_plans = NULL;
      opt.tp_weights = NULL;
      opt.tp_size = 0;
      AmkEngine *again = amk_engine_create(amk_vm_engine(), dp, w, &opt, diag);
      CHECK(&c, again != NULL);
      amk_engine_free(again);
    }
    amk_engine_free(decode);
    amk_weights_free(w);
  }
  amk_plan_free(pp);
  amk_plan_free(dp);
  amk_module_free(pm);
  amk_module_free(dm);
  amk_diag_free(diag);
  return unit_finish("test_weights_share", &c);
}
