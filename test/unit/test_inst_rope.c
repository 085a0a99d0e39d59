/* ROPE: rotate-half with inv_freq[i] = theta^(-i/half); expected values
 * from python3's math module. */
#include "test_inst_util.h"

static AmkInstParams rope_params(int head_dim, double theta) {
  AmkInstParams p = {0};
  set_int(&p, "head_dim", head_dim);
  set_float(&p, "theta", theta);
  return p;
}

/* One head [1, 2, 3, 4] at position 1, theta 10000: half = 2,
 * inv_freq = [1, 10000^-0.5 = 0.01], so angles [1, 0.01];
 * out = [1 cos1 - 3 sin1, 2 cos.01 - 4 sin.01, 3 cos1 + 1 sin1,
 *        4 cos.01 + 2 sin.01]. */
static const double rotated[4] = {-1.9841106485555495, 1.959900667496664,
                                  2.4623779024123156, 4.019799668334994};

static void test_one_head(UnitCounts *c) {
  char err[160];
  float x[4] = {1, 2, 3, 4}, out[4];
  int32_t pos[1] = {1};
  AmkTensorView in[2] = {view2(x, AMK_DTYPE_F32, 1, 4),
                         view1(pos, AMK_DTYPE_I32, 1)};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 1, 4);
  AmkInstParams p = rope_params(4, 10000.0);
  CHECK_RUN(c, AMK_OP_ROPE, &p, in, 2, &o, 0);
  for (int i = 0; i < 4; i++)
    CHECK(c, near(out[i], rotated[i], 1e-6));

  /* Position 0 is the identity, exactly. */
  pos[0] = 0;
  CHECK_RUN(c, AMK_OP_ROPE, &p, in, 2, &o, 0);
  CHECK(c, memcmp(out, x, sizeof x) == 0);

  /* In place. */
  pos[0] = 1;
  CHECK_RUN(c, AMK_OP_ROPE, &p, in, 2, &in[0], 0);
  CHECK(c, near(x[0], rotated[0], 1e-6) && near(x[3], rotated[3], 1e-6));
}

static void test_heads_and_positions(UnitCounts *c) {
  char err[160];
  AmkInstParams p = rope_params(4, 10000.0);
  /* Two heads of one position: each head rotates the same way. */
  float x[8] = {1, 2, 3, 4, 1, 2, 3, 4}, out[8];
  int32_t one[1] = {1};
  AmkTensorView in[2] = {view2(x, AMK_DTYPE_F32, 1, 8),
                         view1(one, AMK_DTYPE_I32, 1)};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 1, 8);
  CHECK_RUN(c, AMK_OP_ROPE, &p, in, 2, &o, 0);
  for (int i = 0; i < 4; i++)
    CHECK(c, near(out[i], rotated[i], 1e-6) && out[4 + i] == out[i]);

  /* Two positions [0, 1]: row 0 unchanged, row 1 rotated. */
  int32_t two[2] = {0, 1};
  AmkTensorView in2[2] = {view2(x, AMK_DTYPE_F32, 2, 4),
                          view1(two, AMK_DTYPE_I32, 2)};
  AmkTensorView o2 = view2(out, AMK_DTYPE_F32, 2, 4);
  CHECK_RUN(c, AMK_OP_ROPE, &p, in2, 2, &o2, 0);
  CHECK(c, out[0] == 1 && out[1] == 2 && out[2] == 3 && out[3] == 4);
  CHECK(c, near(out[4], rotated[0], 1e-6) && near(out[7], rotated[3], 1e-6));
}

/* Given inverse frequencies [0.5, 0] at position 2: angles [1, 0]. */
static void test_given_frequencies(UnitCounts *c) {
  char err[160];
  AmkInstParams p = rope_params(4, 10000.0);
  float x[4] = {1, 2, 3, 4}, out[4], freq[2] = {0.5f, 0.0f};
  int32_t pos[1] = {2};
  AmkTensorView in[3] = {view2(x, AMK_DTYPE_F32, 1, 4),
                         view1(pos, AMK_DTYPE_I32, 1),
                         view1(freq, AMK_DTYPE_F32, 2)};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 1, 4);
  CHECK_RUN(c, AMK_OP_ROPE, &p, in, 3, &o, 0);
  CHECK(c, near(out[0], rotated[0], 1e-6) && out[1] == 2.0f &&
               near(out[2], rotated[2], 1e-6) && out[3] == 4.0f);

  AmkInstExtra extra = {.rope_inv_freq = freq};
  float out2[4];
  AmkTensorView o2 = view2(out2, AMK_DTYPE_F32, 1, 4);
  CHECK(c, amk_inst_execute(AMK_OP_ROPE, &p, in, 2, &o2, 1, &extra, err,
                            sizeof err) == 0);
  CHECK(c, memcmp(out, out2, sizeof out) == 0);

  AmkTensorView wrong[3] = {in[0], in[1], view1(freq, AMK_DTYPE_F32, 1)};
  CHECK_RUN(c, AMK_OP_ROPE, &p, wrong, 3, &o, AMK_INST_ERR_SHAPE);
}

static void test_rope_errors(UnitCounts *c) {
  char err[160];
  float x[6] = {0}, out[6];
  int32_t pos[1] = {1};
  float fpos[1] = {1};
  AmkTensorView in[2] = {view2(x, AMK_DTYPE_F32, 1, 6),
                         view1(pos, AMK_DTYPE_I32, 1)};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 1, 6);
  AmkInstParams p = rope_params(4, 10000.0); /* 6 is not whole heads of 4 */
  CHECK_RUN(c, AMK_OP_ROPE, &p, in, 2, &o, AMK_INST_ERR_SHAPE);
  p = rope_params(3, 10000.0);
  CHECK_RUN(c, AMK_OP_ROPE, &p, in, 2, &o, AMK_INST_ERR_PARAM);
  p = rope_params(2, 10000.0);
  AmkTensorView float_pos[2] = {in[0], view1(fpos, AMK_DTYPE_F32, 1)};
  CHECK_RUN(c, AMK_OP_ROPE, &p, float_pos, 2, &o, AMK_INST_ERR_DTYPE);
  AmkInstParams no_theta = {0};
  set_int(&no_theta, "head_dim", 2);
  CHECK_RUN(c, AMK_OP_ROPE, &no_theta, in, 2, &o, AMK_INST_ERR_PARAM);
  AmkTensorView four[4] = {in[0], in[1], in[1], in[1]};
  CHECK_RUN(c, AMK_OP_ROPE, &p, four, 4, &o, AMK_INST_ERR_ARITY);
}

UNIT_MAIN("test_inst_rope", test_one_head, test_heads_and_positions,
          test_given_frequencies, test_rope_errors)
