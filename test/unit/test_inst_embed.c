/* EMBED (row gather, also the reference's reshape) and SAMPLE_ARGMAX. */
#include "test_inst_util.h"

static void test_embed(UnitCounts *c) {
  char err[160];
  AmkInstParams p = {0};
  set_int(&p, "hidden", 2);
  float table[6] = {1, 2, 3, 4, 5, 6}; /* [3, 2] */
  int32_t ids[2] = {2, 0};
  float out[4];
  AmkTensorView in[2] = {view1(ids, AMK_DTYPE_I32, 2),
                         view2(table, AMK_DTYPE_F32, 3, 2)};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 2, 2);
  CHECK_RUN(c, AMK_OP_EMBED, &p, in, 2, &o, 0);
  CHECK(c, out[0] == 5 && out[1] == 6 && out[2] == 1 && out[3] == 2);

  /* A bf16 table gathers exactly into f32. */
  uint16_t bf_table[4] = {0x3f80, 0x3f81, 0xc000, 0x4040}; /* 1, 1.0078125, -2, 3 */
  AmkTensorView bin[2] = {view1(ids, AMK_DTYPE_I32, 1),
                          view2(bf_table, AMK_DTYPE_BF16, 2, 2)};
  ids[0] = 0;
  AmkTensorView o1 = view2(out, AMK_DTYPE_F32, 1, 2);
  CHECK_RUN(c, AMK_OP_EMBED, &p, bin, 2, &o1, 0);
  CHECK(c, out[0] == 1.0f && out[1] == 1.0078125f);

  /* The reference's reshape: id 0 of a [1, 4] activation into [2, 2]. */
  float flat[4] = {7, 8, 9, 10}, heads[4];
  int32_t zero[1] = {0};
  AmkTensorView rin[2] = {view1(zero, AMK_DTYPE_I32, 1),
                          view2(flat, AMK_DTYPE_F32, 1, 4)};
  AmkTensorView ro = view2(heads, AMK_DTYPE_F32, 2, 2);
  CHECK_RUN(c, AMK_OP_EMBED, &p, rin, 2, &ro, 0);
  CHECK(c, memcmp(heads, flat, sizeof flat) == 0);

  /* Out of range ids are errors, and nothing is written. */
  ids[0] = 3;
  ids[1] = 0;
  out[0] = out[1] = out[2] = out[3] = -1;
  CHECK_RUN(c, AMK_OP_EMBED, &p, in, 2, &o, AMK_INST_ERR_INDEX);
  CHECK(c, strstr(err, "embed: token id 3 is outside the table's 3 rows") == err);
  CHECK(c, out[0] == -1 && out[3] == -1);
  ids[0] = -1;
  CHECK_RUN(c, AMK_OP_EMBED, &p, in, 2, &o, AMK_INST_ERR_INDEX);
  ids[0] = 1;
  AmkTensorView wrong = view2(out, AMK_DTYPE_F32, 1, 3);
  CHECK_RUN(c, AMK_OP_EMBED, &p, in, 2, &wrong, AMK_INST_ERR_SHAPE);
  float fid[1] = {0};
  AmkTensorView float_ids[2] = {view1(fid, AMK_DTYPE_F32, 1), in[1]};
  CHECK_RUN(c, AMK_OP_EMBED, &p, float_ids, 2, &o1, AMK_INST_ERR_DTYPE);
}

static void test_argmax(UnitCounts *c) {
  char err[160];
  AmkInstParams p = {0};
  /* Ties: the lowest index wins. */
  float logits[5] = {1, 7, 3, 7, -2};
  int32_t token[1] = {-1};
  AmkTensorView in = view2(logits, AMK_DTYPE_F32, 1, 5);
  AmkTensorView o = view1(token, AMK_DTYPE_I32, 1);
  CHECK_RUN(c, AMK_OP_SAMPLE_ARGMAX, &p, &in, 1, &o, 0);
  CHECK(c, token[0] == 1);
  /* The first element can win; all equal gives 0. */
  float flat[3] = {4, 4, 4};
  AmkTensorView fin = view2(flat, AMK_DTYPE_F32, 1, 3);
  CHECK_RUN(c, AMK_OP_SAMPLE_ARGMAX, &p, &fin, 1, &o, 0);
  CHECK(c, token[0] == 0);
  /* Per row, and a NaN counts as the largest (torch.argmax). */
  float rows[6] = {0, -1, 5, -INFINITY, NAN, 100};
  int32_t two[2];
  AmkTensorView rin = view2(rows, AMK_DTYPE_F32, 2, 3);
  AmkTensorView ro = view1(two, AMK_DTYPE_I32, 2);
  CHECK_RUN(c, AMK_OP_SAMPLE_ARGMAX, &p, &rin, 1, &ro, 0);
  CHECK(c, two[0] == 2 && two[1] == 1);
  /* bf16 logits: 0x3f81 (1.0078125) beats 0x3f80 (1). */
  uint16_t bf[2] = {0x3f80, 0x3f81};
  AmkTensorView bin = view2(bf, AMK_DTYPE_BF16, 1, 2);
  CHECK_RUN(c, AMK_OP_SAMPLE_ARGMAX, &p, &bin, 1, &o, 0);
  CHECK(c, token[0] == 1);
  AmkTensorView too_many = view1(two, AMK_DTYPE_I32, 2);
  CHECK_RUN(c, AMK_OP_SAMPLE_ARGMAX, &p, &in, 1, &too_many, AMK_INST_ERR_SHAPE);
}

UNIT_MAIN("test_inst_embed", test_embed, test_argmax)
