/* Reordered weights (a KEY^T or KEY[:, B:E] source) are copied when asked
 * for, not at load: amk_weights_lend's copy goes when the lend is returned
 * (the CUDA engine uploads one at a time), amk_weights_data's stays; a
 * prefill program borrowing KEY from a decode program's KEY^T maps the
 * checkpoint's tensor itself, or, from random weights, makes the transpose
 * on demand and keeps nothing after the lend.
 *
 *   test_weights_reordered CHECKPOINT_DIR DECODE.amkir PREFILL.amkir
 *
 * DECODE is llama-tiny fused with split_down (L0.down_proj.wt [160, 64],
 * source KEY^T), PREFILL its unfused prefill program (L0.down_proj.w
 * [64, 160], source KEY). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/fileio.h"
#include "amk/io.h"
#include "amk/plan.h"
#include "amk/weights.h"
#include "unit.h"
#include "unit_program.h"

/* t [C, R] is the transpose of m [R, C] (f32, bit for bit). */
static bool is_transpose(const float *m, const float *t, int rows, int cols) {
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++)
      if (memcmp(&m[i * cols + j], &t[j * rows + i], sizeof(float)) != 0)
        return false;
  return true;
}

enum { ROWS = 64, COLS = 160 }; /* the down weight [hidden, intermediate] */

int main(int argc, char **argv) {
  UnitCounts c = {0};
  if (argc != 4) {
    fprintf(stderr, "usage: test_weights_reordered CHECKPOINT_DIR DECODE.amkir PREFILL.amkir\n");
    return 2;
  }
  AmkDiagEngine *diag = amk_diag_new(stderr);
  AmkModule *dm = unit_load_program(argv[2]), *pm = unit_load_program(argv[3]);
  AmkPlan *dp = dm ? amk_plan_build(dm, NULL, diag) : NULL;
  AmkPlan *pp = pm ? amk_plan_build(pm, NULL, diag) : NULL;
  CHECK(&c, dp && pp);
  if (!dp || !pp)
    return unit_finish("test_weights_reordered", &c);
  int32_t wt = unit_plan_buffer(dp, "L0.down_proj.wt"), wd = unit_plan_buffer(pp, "L0.down_proj.w");
  CHECK(&c, wt >= 0 && wd >= 0);
  size_t nbytes = ROWS * COLS * sizeof(float);

  /* The prefill program's own load maps KEY: the reference bytes. */
  AmkWeights *direct = amk_weights_load(pp, argv[1], diag);
  CHECK(&c, direct && amk_weights_origin(direct, (uint32_t)wd) == AMK_WEIGHTS_MAPPED);
  const float *key = direct ? amk_weights_data(direct, (uint32_t)wd, NULL) : NULL;

  AmkWeights *w = amk_weights_load(dp, argv[1], diag);
  CHECK(&c, w != NULL);
  if (w && key) {
    CHECK(&c, amk_weights_origin(w, (uint32_t)wt) == AMK_WEIGHTS_REORDERED);
    size_t base = amk_weights_host_bytes(w); /* nothing made for the KEY^T buffers yet */
    CHECK(&c, base == 0);
    size_t n = 0;
    const float *lent = amk_weights_lend(w, (uint32_t)wt, &n);
    CHECK(&c, lent && n == nbytes && amk_weights_host_bytes(w) == base + nbytes &&
                  is_transpose(key, lent, ROWS, COLS));
    /* Two lends share one copy; it goes with the last. */
    CHECK(&c, amk_weights_lend(w, (uint32_t)wt, NULL) == lent);
    amk_weights_unlend(w, (uint32_t)wt);
    CHECK(&c, amk_weights_host_bytes(w) == base + nbytes);
    amk_weights_unlend(w, (uint32_t)wt);
    CHECK(&c, amk_weights_host_bytes(w) == base);
    /* amk_weights_data's copy stays, lends and returns or not. */
    const float *kept = amk_weights_data(w, (uint32_t)wt, NULL);
    CHECK(&c, kept && is_transpose(key, kept, ROWS, COLS));
    CHECK(&c, amk_weights_lend(w, (uint32_t)wt, NULL) == kept);
    amk_weights_unlend(w, (uint32_t)wt);
    CHECK(&c, amk_weights_host_bytes(w) == base + nbytes &&
                  amk_weights_data(w, (uint32_t)wt, NULL) == kept);

    /* Shared into the prefill program: KEY is the checkpoint's tensor,
     * mapped, no copy. */
    AmkWeights *shared = amk_weights_share(pp, w, diag);
    CHECK(&c, shared && amk_weights_origin(shared, (uint32_t)wd) == AMK_WEIGHTS_MAPPED &&
                  amk_weights_host_bytes(shared) == 0);
    const float *mapped = shared ? amk_weights_data(shared, (uint32_t)wd, NULL) : NULL;
    CHECK(&c, mapped && memcmp(mapped, key, nbytes) == 0);
    const AmkWeightPiece *pieces;
    uint32_t n_pieces = 0;
    CHECK(&c, shared && amk_weights_pieces(shared, (uint32_t)wd, &pieces, &n_pieces) &&
                  n_pieces == 1 && pieces[0].nbytes == nbytes);
    amk_weights_free(shared);
  }
  amk_weights_free(w);

  /* Random weights: the borrowed KEY is the transpose of the lender's
   * random KEY^T matrix, made when lent, and neither side keeps a copy
   * after the lend. */
  AmkWeights *r = amk_weights_random(dp, 7, diag);
  AmkWeights *rs = r ? amk_weights_share(pp, r, diag) : NULL;
  CHECK(&c, rs && amk_weights_origin(rs, (uint32_t)wd) == AMK_WEIGHTS_REORDERED);
  if (rs) {
    float *copy = malloc(nbytes);
    const float *lent = amk_weights_lend(rs, (uint32_t)wd, NULL);
    CHECK(&c, lent != NULL);
    if (lent)
      memcpy(copy, lent, nbytes);
    amk_weights_unlend(rs, (uint32_t)wd);
    CHECK(&c, amk_weights_host_bytes(rs) == 0 && amk_weights_host_bytes(r) == 0);
    const float *rt = amk_weights_data(r, (uint32_t)wt, NULL);
    CHECK(&c, rt && is_transpose(copy, rt, ROWS, COLS));
    free(copy);
  }
  amk_weights_free(rs);
  amk_weights_free(r);
  amk_weights_free(direct);
  amk_plan_free(dp);
  amk_plan_free(pp);
  amk_module_free(dm);
  amk_module_free(pm);
  amk_diag_free(diag);
  return unit_finish("test_weights_reordered", &c);
}
