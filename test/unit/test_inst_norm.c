/* RMSNORM and LAYERNORM against values from python3's math module. */
#include "test_inst_util.h"

static void test_rmsnorm(UnitCounts *c) {
  AmkInstParams p = {0};
  char err[160];
  set_int(&p, "hidden", 4);
  set_float(&p, "eps", 0.0);
  /* Row 0: mean(x^2) = 30/4 = 7.5, r = 1/sqrt(7.5) = 0.3651483716701107.
   * Row 1: mean = 9/4, r = 2/3; 3 * 2/3 * w = 4. */
  float x[8] = {1, 2, 3, 4, 0, 0, 0, 3}, w[4] = {1, 1, 1, 2}, out[8];
  AmkTensorView in[2] = {view2(x, AMK_DTYPE_F32, 2, 4), view1(w, AMK_DTYPE_F32, 4)};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 2, 4);
  CHECK_RUN(c, AMK_OP_RMSNORM, &p, in, 2, &o, 0);
  const double r = 0.3651483716701107;
  CHECK(c, near(out[0], r, 1e-6) && near(out[1], 2 * r, 1e-6) &&
               near(out[2], 3 * r, 1e-6) && near(out[3], 8 * r, 1e-6));
  CHECK(c, out[4] == 0.0f && out[5] == 0.0f && out[6] == 0.0f);
  CHECK(c, near(out[7], 4.0, 1e-6));

  /* eps enters under the root: mean 7.5 + eps 0.5 = 8, r = 1/sqrt(8). */
  set_float(&p, "eps", 0.5);
  CHECK_RUN(c, AMK_OP_RMSNORM, &p, in, 2, &o, 0);
  CHECK(c, near(out[0], 0.35355339059327373, 1e-6));

  /* bf16 output: r * 1 = 0.36514837 rounds to the bf16 0.365234375 (0x3ebb). */
  uint16_t bf[8];
  set_float(&p, "eps", 0.0);
  AmkTensorView bo = view2(bf, AMK_DTYPE_BF16, 2, 4);
  CHECK_RUN(c, AMK_OP_RMSNORM, &p, in, 2, &bo, 0);
  CHECK(c, bf[0] == 0x3ebb);

  /* Errors: weight of the wrong size, hidden not dividing x, missing eps. */
  AmkTensorView short_w[2] = {in[0], view1(w, AMK_DTYPE_F32, 3)};
  CHECK_RUN(c, AMK_OP_RMSNORM, &p, short_w, 2, &o, AMK_INST_ERR_SHAPE);
  AmkInstParams odd = {0};
  set_int(&odd, "hidden", 3);
  set_float(&odd, "eps", 0.0);
  CHECK_RUN(c, AMK_OP_RMSNORM, &odd, in, 2, &o, AMK_INST_ERR_SHAPE);
  AmkInstParams no_eps = {0};
  set_int(&no_eps, "hidden", 4);
  CHECK_RUN(c, AMK_OP_RMSNORM, &no_eps, in, 2, &o, AMK_INST_ERR_PARAM);
  CHECK(c, strstr(err, "missing param 'eps'") != NULL);
}

static void test_layernorm(UnitCounts *c) {
  AmkInstParams p = {0};
  char err[160];
  set_int(&p, "hidden", 4);
  set_float(&p, "eps", 0.0);
  /* mean 2.5, biased variance 1.25: (x - 2.5) / sqrt(1.25). */
  float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 1, 1}, b[4] = {0, 0, 0, 10}, out[4];
  AmkTensorView in[3] = {view1(x, AMK_DTYPE_F32, 4), view1(w, AMK_DTYPE_F32, 4),
                         view1(b, AMK_DTYPE_F32, 4)};
  AmkTensorView o = view1(out, AMK_DTYPE_F32, 4);
  const double want[4] = {-1.3416407864998738, -0.4472135954999579,
                          0.4472135954999579, 1.3416407864998738};
  CHECK_RUN(c, AMK_OP_LAYERNORM, &p, in, 2, &o, 0);
  for (int i = 0; i < 4; i++)
    CHECK(c, near(out[i], want[i], 1e-6));
  CHECK_RUN(c, AMK_OP_LAYERNORM, &p, in, 3, &o, 0);
  CHECK(c, near(out[0], want[0], 1e-6) && near(out[3], want[3] + 10, 1e-6));
  /* eps 0.75: (x - 2.5) / sqrt(2). */
  set_float(&p, "eps", 0.75);
  CHECK_RUN(c, AMK_OP_LAYERNORM, &p, in, 2, &o, 0);
  CHECK(c, near(out[0], -1.0606601717798212, 1e-6));
  AmkTensorView short_b[3] = {in[0], in[1], view1(b, AMK_DTYPE_F32, 2)};
  CHECK_RUN(c, AMK_OP_LAYERNORM, &p, short_b, 3, &o, AMK_INST_ERR_SHAPE);
}

UNIT_MAIN("test_inst_norm", test_rmsnorm, test_layernorm)
