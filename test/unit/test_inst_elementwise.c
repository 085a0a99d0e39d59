/* ADD, MUL, SILU_MUL, GELU, SOFTMAX, ALLREDUCE_SHARD. Expected values are
 * exact sums or the formula evaluated with python3's math module. */
#include "test_inst_util.h"

static void test_add_mul(UnitCounts *c) {
  AmkInstParams p = {0};
  char err[160];
  float a[3] = {1.5f, -2.0f, 0.25f}, b[3] = {2.0f, 3.0f, -4.0f}, out[3];
  AmkTensorView in[2] = {view1(a, AMK_DTYPE_F32, 3), view1(b, AMK_DTYPE_F32, 3)};
  AmkTensorView o = view1(out, AMK_DTYPE_F32, 3);
  CHECK_RUN(c, AMK_OP_ADD, &p, in, 2, &o, 0);
  CHECK(c, out[0] == 3.5f && out[1] == 1.0f && out[2] == -3.75f);
  CHECK_RUN(c, AMK_OP_MUL, &p, in, 2, &o, 0);
  CHECK(c, out[0] == 3.0f && out[1] == -6.0f && out[2] == -1.0f);

  /* One input: times `scale`, or 1 when absent. */
  set_float(&p, "scale", 0.5);
  CHECK_RUN(c, AMK_OP_MUL, &p, in, 1, &o, 0);
  CHECK(c, out[0] == 0.75f && out[1] == -1.0f && out[2] == 0.125f);
  AmkInstParams none = {0};
  CHECK_RUN(c, AMK_OP_MUL, &none, in, 1, &o, 0);
  CHECK(c, out[0] == 1.5f && out[1] == -2.0f && out[2] == 0.25f);

  /* In place: out aliases input 0. */
  CHECK_RUN(c, AMK_OP_ADD, &none, in, 2, &in[0], 0);
  CHECK(c, a[0] == 3.5f && a[1] == 1.0f && a[2] == -3.75f);

  /* Mixed dtypes: a bf16 operand widens, an f32 result. */
  uint16_t bf[3] = {0x3f80, 0x4000, 0xbf80}; /* 1, 2, -1 */
  AmkTensorView mixed[2] = {view1(bf, AMK_DTYPE_BF16, 3),
                            view1(b, AMK_DTYPE_F32, 3)};
  CHECK_RUN(c, AMK_OP_ADD, &none, mixed, 2, &o, 0);
  CHECK(c, out[0] == 3.0f && out[1] == 5.0f && out[2] == -5.0f);

  AmkTensorView short_b[2] = {in[0], view1(b, AMK_DTYPE_F32, 2)};
  CHECK_RUN(c, AMK_OP_ADD, &none, short_b, 2, &o, AMK_INST_ERR_SHAPE);
  CHECK(c, strstr(err, "add: input 1 has 2 elements") == err);
}

/* With N_tile given an elementwise op covers only columns
 * [n_off, n_off + N_tile) of each row (a tiled step of a fused recipe). */
static void test_column_tile(UnitCounts *c) {
  AmkInstParams p = {0};
  char err[160];
  set_int(&p, "n_off", 1);
  set_int(&p, "N_tile", 2);
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {10, 20, 30, 40, 50, 60, 70, 80};
  float out[8] = {0};
  AmkTensorView in[2] = {view2(a, AMK_DTYPE_F32, 2, 4),
                         view2(b, AMK_DTYPE_F32, 2, 4)};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 2, 4);
  CHECK_RUN(c, AMK_OP_ADD, &p, in, 2, &o, 0);
  float want[8] = {0, 22, 33, 0, 0, 66, 77, 0};
  CHECK(c, memcmp(out, want, sizeof want) == 0);
  set_int(&p, "N_tile", 4); /* 1 + 4 > 4 columns */
  CHECK_RUN(c, AMK_OP_ADD, &p, in, 2, &o, AMK_INST_ERR_SHAPE);
}

static void test_silu_gelu(UnitCounts *c) {
  AmkInstParams p = {0};
  char err[160];
  float gate[3] = {0.0f, 1.0f, -2.0f}, up[3] = {5.0f, 2.0f, 3.0f}, out[4];
  AmkTensorView in[2] = {view1(gate, AMK_DTYPE_F32, 3),
                         view1(up, AMK_DTYPE_F32, 3)};
  AmkTensorView o = view1(out, AMK_DTYPE_F32, 3);
  CHECK_RUN(c, AMK_OP_SILU_MUL, &p, in, 2, &o, 0);
  CHECK(c, out[0] == 0.0f);
  CHECK(c, near(out[1], 1.4621171572600098, 1e-6));  /* 2 / (1 + e^-1) */
  CHECK(c, near(out[2], -0.7152175321327052, 1e-6)); /* 3 * -2 / (1 + e^2) */

  float x[4] = {0.0f, 1.0f, -1.0f, 2.0f};
  AmkTensorView gx = view1(x, AMK_DTYPE_F32, 4);
  AmkTensorView go = view1(out, AMK_DTYPE_F32, 4);
  CHECK_RUN(c, AMK_OP_GELU, &p, &gx, 1, &go, 0);
  CHECK(c, out[0] == 0.0f);
  CHECK(c, near(out[1], 0.8413447460685429, 1e-6)); /* exact erf, not tanh */
  CHECK(c, near(out[2], -0.15865525393145707, 1e-6));
  CHECK(c, near(out[3], 1.9544997361036416, 1e-6));
  /* The tanh approximation gives 0.841192 at 1; exact erf is well apart. */
  CHECK(c, fabsf(out[1] - 0.841192f) > 1e-4f);
}

static void test_softmax(UnitCounts *c) {
  AmkInstParams p = {0};
  char err[160];
  float x[6] = {1, 2, 3, 1001, 1002, 1003}, out[6];
  AmkTensorView in = view2(x, AMK_DTYPE_F32, 2, 3);
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 2, 3);
  CHECK_RUN(c, AMK_OP_SOFTMAX, &p, &in, 1, &o, 0);
  const double want[3] = {0.09003057317038046, 0.24472847105479767,
                          0.6652409557748219};
  for (int i = 0; i < 3; i++) {
    CHECK(c, near(out[i], want[i], 1e-6));
    /* max subtraction: a shifted row does not overflow */
    CHECK(c, near(out[3 + i], want[i], 1e-6));
  }

  /* dim 0: down the columns. softmax([1, 1001]) = [e^-1000 ~ 0, 1]. */
  set_int(&p, "dim", 0);
  CHECK_RUN(c, AMK_OP_SOFTMAX, &p, &in, 1, &o, 0);
  CHECK(c, out[0] == 0.0f && out[3] == 1.0f && out[2] == 0.0f && out[5] == 1.0f);
  set_int(&p, "dim", 2);
  CHECK_RUN(c, AMK_OP_SOFTMAX, &p, &in, 1, &o, AMK_INST_ERR_PARAM);
}

static void test_allreduce(UnitCounts *c) {
  AmkInstParams p = {0};
  char err[160];
  float s0[2] = {1, 2}, s1[2] = {10, 20}, s2[2] = {100, 200}, out[2];
  AmkTensorView in[3] = {view1(s0, AMK_DTYPE_F32, 2), view1(s1, AMK_DTYPE_F32, 2),
                         view1(s2, AMK_DTYPE_F32, 2)};
  AmkTensorView o = view1(out, AMK_DTYPE_F32, 2);
  CHECK_RUN(c, AMK_OP_ALLREDUCE_SHARD, &p, in, 3, &o, 0);
  CHECK(c, out[0] == 111.0f && out[1] == 222.0f);
  CHECK_RUN(c, AMK_OP_ALLREDUCE_SHARD, &p, in, 1, &o, 0);
  CHECK(c, out[0] == 1.0f && out[1] == 2.0f);
  /* fp32 accumulation in input order: 2^24 + 1 rounds (a tie, to even) back
   * to 2^24, twice; a double accumulator would give 2^24 + 2. */
  float big[1] = {16777216.0f}, one[1] = {1.0f}, r[1];
  AmkTensorView order[3] = {view1(big, AMK_DTYPE_F32, 1),
                            view1(one, AMK_DTYPE_F32, 1),
                            view1(one, AMK_DTYPE_F32, 1)};
  AmkTensorView ro = view1(r, AMK_DTYPE_F32, 1);
  CHECK_RUN(c, AMK_OP_ALLREDUCE_SHARD, &p, order, 3, &ro, 0);
  CHECK(c, r[0] == 16777216.0f);
  AmkTensorView bad[2] = {in[0], view1(s1, AMK_DTYPE_F32, 1)};
  CHECK_RUN(c, AMK_OP_ALLREDUCE_SHARD, &p, bad, 2, &o, AMK_INST_ERR_SHAPE);
}

UNIT_MAIN("test_inst_elementwise", test_add_mul, test_column_tile,
          test_silu_gelu, test_softmax, test_allreduce)
