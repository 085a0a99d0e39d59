/* Row windows (M_tile, m_off) of the per-row ops: only rows
 * [m_off, m_off + M_tile) are computed and written, against hand-computed
 * values; windows outside the rows are errors. */
#include "test_inst_util.h"

static void test_norm_window(UnitCounts *c) {
  char err[160];
  AmkInstParams p = {0};
  set_int(&p, "hidden", 4);
  set_float(&p, "eps", 0.0);
  set_int(&p, "M_tile", 1);
  set_int(&p, "m_off", 1);
  /* Row 1: mean(x^2) = 9/4, r = 2/3: {0, 0, 0, 3 * 2/3 * 2 = 4}. Rows 0 and
   * 2 keep the output's -1s. */
  float x[12] = {1, 2, 3, 4, 0, 0, 0, 3, 5, 5, 5, 5}, w[4] = {1, 1, 1, 2}, out[12];
  for (int i = 0; i < 12; i++)
    out[i] = -1;
  AmkTensorView in[2] = {view2(x, AMK_DTYPE_F32, 3, 4), view1(w, AMK_DTYPE_F32, 4)};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 3, 4);
  CHECK_RUN(c, AMK_OP_RMSNORM, &p, in, 2, &o, 0);
  const float want[12] = {-1, -1, -1, -1, 0, 0, 0, 4, -1, -1, -1, -1};
  CHECK(c, memcmp(out, want, sizeof want) == 0);

  /* LAYERNORM of rows [1, 3), eps 1: row 2 is constant, so (x - mean) = 0. */
  AmkInstParams lp = p;
  set_int(&lp, "M_tile", 2);
  set_float(&lp, "eps", 1.0);
  for (int i = 0; i < 12; i++)
    out[i] = -1;
  CHECK_RUN(c, AMK_OP_LAYERNORM, &lp, in, 2, &o, 0);
  CHECK(c, out[0] == -1 && out[3] == -1);
  CHECK(c, out[8] == 0 && out[11] == 0);
  /* Row 1 {0,0,0,3}: mean 0.75, var 1.6875, (3 - 0.75)/sqrt(1.6875 + 1) * 2. */
  CHECK(c, near(out[7], 2.744974265986884, 1e-6));

  /* A window past the rows, a negative offset, m_off without M_tile. */
  set_int(&p, "M_tile", 3);
  CHECK_RUN(c, AMK_OP_RMSNORM, &p, in, 2, &o, AMK_INST_ERR_SHAPE);
  CHECK(c, strstr(err, "rmsnorm: row window [1, 4) is outside the 3 rows") == err);
  set_int(&p, "M_tile", 1);
  set_int(&p, "m_off", -1);
  CHECK_RUN(c, AMK_OP_RMSNORM, &p, in, 2, &o, AMK_INST_ERR_SHAPE);
  set_int(&p, "M_tile", 0);
  set_int(&p, "m_off", 0);
  CHECK_RUN(c, AMK_OP_RMSNORM, &p, in, 2, &o, AMK_INST_ERR_SHAPE);
  AmkInstParams only_off = {0};
  set_int(&only_off, "hidden", 4);
  set_float(&only_off, "eps", 0.0);
  set_int(&only_off, "m_off", 1);
  CHECK_RUN(c, AMK_OP_RMSNORM, &only_off, in, 2, &o, AMK_INST_ERR_SHAPE);
  CHECK(c, strstr(err, "m_off without M_tile") != NULL);
}

static void test_rope_window(UnitCounts *c) {
  char err[160];
  AmkInstParams p = {0};
  set_int(&p, "head_dim", 2);
  set_float(&p, "theta", 10000.0);
  set_int(&p, "M_tile", 1);
  set_int(&p, "m_off", 1);
  /* Three position rows of one head of 2: inv_freq[0] = 1, so row 1 at
   * position 1 turns (1, 0) into (cos 1, sin 1). */
  float x[6] = {1, 0, 1, 0, 1, 0}, out[6] = {-1, -1, -1, -1, -1, -1};
  int32_t pos[3] = {5, 1, 7};
  AmkTensorView in[2] = {view2(x, AMK_DTYPE_F32, 3, 2), view1(pos, AMK_DTYPE_I32, 3)};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 3, 2);
  CHECK_RUN(c, AMK_OP_ROPE, &p, in, 2, &o, 0);
  CHECK(c, out[0] == -1 && out[1] == -1 && out[4] == -1 && out[5] == -1);
  CHECK(c, near(out[2], 0.5403023058681398, 1e-6) && near(out[3], 0.8414709848078965, 1e-6));
  set_int(&p, "m_off", 3);
  CHECK_RUN(c, AMK_OP_ROPE, &p, in, 2, &o, AMK_INST_ERR_SHAPE);
  CHECK(c, strstr(err, "rope: row window [3, 4) is outside the 3 rows") == err);
}

static void test_embed_window(UnitCounts *c) {
  char err[160];
  AmkInstParams p = {0};
  set_int(&p, "hidden", 2);
  set_int(&p, "M_tile", 2);
  set_int(&p, "m_off", 1);
  float table[6] = {1, 2, 3, 4, 5, 6}; /* [3, 2] */
  /* Id 0 is outside the table but outside the window too: not read. */
  int32_t ids[3] = {99, 2, 0};
  float out[6] = {-1, -1, -1, -1, -1, -1};
  AmkTensorView in[2] = {view1(ids, AMK_DTYPE_I32, 3), view2(table, AMK_DTYPE_F32, 3, 2)};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 3, 2);
  CHECK_RUN(c, AMK_OP_EMBED, &p, in, 2, &o, 0);
  const float want[6] = {-1, -1, 5, 6, 1, 2};
  CHECK(c, memcmp(out, want, sizeof want) == 0);
  set_int(&p, "M_tile", 3);
  CHECK_RUN(c, AMK_OP_EMBED, &p, in, 2, &o, AMK_INST_ERR_SHAPE);
}

static void test_kv_append_window(UnitCounts *c) {
  char err[160];
  AmkInstParams p = {0};
  set_int(&p, "pos", 1);
  set_int(&p, "M_tile", 1);
  set_int(&p, "m_off", 1);
  /* cache [4 positions, 1 kv head, 2 dims]; new rows [2, 2]: row 1 goes to
   * cache row pos + 1 = 2, row 0 stays unwritten. */
  float cache[8] = {0}, fresh[4] = {1, 2, 3, 4};
  AmkTensorView in[2] = {view2(fresh, AMK_DTYPE_F32, 2, 2), view3(cache, AMK_DTYPE_F32, 4, 1, 2)};
  AmkTensorView o = view3(cache, AMK_DTYPE_F32, 4, 1, 2);
  CHECK_RUN(c, AMK_OP_KV_APPEND, &p, in, 2, &o, 0);
  const float want[8] = {0, 0, 0, 0, 3, 4, 0, 0};
  CHECK(c, memcmp(cache, want, sizeof want) == 0);

  /* The step's position moves the window with it: rows 0+1 = 1. */
  AmkInstExtra extra = {.has_position = true, .position = 0};
  CHECK(c, amk_inst_execute(AMK_OP_KV_APPEND, &p, in, 2, &o, 1, &extra, err, sizeof err) == 0);
  CHECK(c, cache[2] == 3 && cache[3] == 4);

  /* The whole append must fit even when the window would (pos 3 + 2 rows
   * > 4), the window must be inside the new rows, and the cache in place. */
  set_int(&p, "pos", 3);
  CHECK_RUN(c, AMK_OP_KV_APPEND, &p, in, 2, &o, AMK_INST_ERR_INDEX);
  set_int(&p, "pos", 0);
  set_int(&p, "m_off", 2);
  CHECK_RUN(c, AMK_OP_KV_APPEND, &p, in, 2, &o, AMK_INST_ERR_SHAPE);
  set_int(&p, "m_off", 0);
  float other[8];
  AmkTensorView co = view3(other, AMK_DTYPE_F32, 4, 1, 2);
  CHECK_RUN(c, AMK_OP_KV_APPEND, &p, in, 2, &co, AMK_INST_ERR_SHAPE);
  CHECK(c, strstr(err, "in place") != NULL);
}

UNIT_MAIN("test_inst_rows", test_norm_window, test_rope_window, test_embed_window,
          test_kv_append_window)
