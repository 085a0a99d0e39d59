/* KV_APPEND: rows written at pos (or at the step's position), bounds
 * checked. */
#include "test_inst_util.h"

static void test_append(UnitCounts *c) {
  char err[160];
  AmkInstParams p = {0};
  set_int(&p, "pos", 2);
  /* cache [3 positions, 2 kv heads, 2 dims], new k [1, 4] */
  float cache[12] = {0}, fresh[4] = {1, 2, 3, 4};
  AmkTensorView in[2] = {view2(fresh, AMK_DTYPE_F32, 1, 4),
                         view3(cache, AMK_DTYPE_F32, 3, 2, 2)};
  AmkTensorView o = view3(cache, AMK_DTYPE_F32, 3, 2, 2);
  CHECK_RUN(c, AMK_OP_KV_APPEND, &p, in, 2, &o, 0);
  const float want[12] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4};
  CHECK(c, memcmp(cache, want, sizeof want) == 0);

  /* The step's position overrides the param. */
  AmkInstExtra extra = {.has_position = true, .position = 0};
  float other[4] = {5, 6, 7, 8};
  in[0] = view2(other, AMK_DTYPE_F32, 1, 4);
  CHECK(c, amk_inst_execute(AMK_OP_KV_APPEND, &p, in, 2, &o, 1, &extra, err,
                            sizeof err) == 0);
  CHECK(c, cache[0] == 5 && cache[3] == 8 && cache[4] == 0 && cache[8] == 1);

  /* A separate output cache first takes the input's contents. */
  float copy[12];
  AmkTensorView co = view3(copy, AMK_DTYPE_F32, 3, 2, 2);
  extra.position = 1;
  CHECK(c, amk_inst_execute(AMK_OP_KV_APPEND, &p, in, 2, &co, 1, &extra, err,
                            sizeof err) == 0);
  const float want_copy[12] = {5, 6, 7, 8, 5, 6, 7, 8, 1, 2, 3, 4};
  CHECK(c, memcmp(copy, want_copy, sizeof want_copy) == 0);

  /* A bf16 cache rounds: 1 + 2^-8 is a tie to the even 1.0 (0x3f80). */
  uint16_t bf_cache[4] = {0};
  float round_me[2] = {1.00390625f, 3.0f};
  AmkInstParams p1 = {0};
  set_int(&p1, "pos", 1);
  AmkTensorView bin[2] = {view1(round_me, AMK_DTYPE_F32, 2),
                          view3(bf_cache, AMK_DTYPE_BF16, 2, 1, 2)};
  AmkTensorView bo = view3(bf_cache, AMK_DTYPE_BF16, 2, 1, 2);
  CHECK_RUN(c, AMK_OP_KV_APPEND, &p1, bin, 2, &bo, 0);
  CHECK(c, bf_cache[0] == 0 && bf_cache[2] == 0x3f80 && bf_cache[3] == 0x4040);
}

static void test_append_errors(UnitCounts *c) {
  char err[160];
  float cache[12] = {0}, fresh[4] = {1, 2, 3, 4};
  AmkTensorView in[2] = {view2(fresh, AMK_DTYPE_F32, 1, 4),
                         view3(cache, AMK_DTYPE_F32, 3, 2, 2)};
  AmkTensorView o = view3(cache, AMK_DTYPE_F32, 3, 2, 2);
  AmkInstParams p = {0};
  set_int(&p, "pos", 3); /* the cache has rows 0..2 */
  CHECK_RUN(c, AMK_OP_KV_APPEND, &p, in, 2, &o, AMK_INST_ERR_INDEX);
  CHECK(c, strstr(err, "kv_append: position 3") == err);
  set_int(&p, "pos", -1);
  CHECK_RUN(c, AMK_OP_KV_APPEND, &p, in, 2, &o, AMK_INST_ERR_INDEX);
  AmkInstExtra extra = {.has_position = true, .position = 1LL << 40};
  CHECK(c, amk_inst_execute(AMK_OP_KV_APPEND, &p, in, 2, &o, 1, &extra, err,
                            sizeof err) == AMK_INST_ERR_INDEX);
  /* Two rows at position 2 run past the end. */
  float two_rows[8] = {0};
  set_int(&p, "pos", 2);
  AmkTensorView in2[2] = {view2(two_rows, AMK_DTYPE_F32, 2, 4), in[1]};
  CHECK_RUN(c, AMK_OP_KV_APPEND, &p, in2, 2, &o, AMK_INST_ERR_INDEX);
  /* 3 elements are not whole rows of 4. */
  AmkTensorView partial[2] = {view1(fresh, AMK_DTYPE_F32, 3), in[1]};
  CHECK_RUN(c, AMK_OP_KV_APPEND, &p, partial, 2, &o, AMK_INST_ERR_SHAPE);
  AmkInstParams no_pos = {0};
  CHECK_RUN(c, AMK_OP_KV_APPEND, &no_pos, in, 2, &o, AMK_INST_ERR_PARAM);
  const float zeros[12] = {0};
  CHECK(c, memcmp(cache, zeros, sizeof zeros) == 0); /* untouched */
}

UNIT_MAIN("test_inst_kv_append", test_append, test_append_errors)
