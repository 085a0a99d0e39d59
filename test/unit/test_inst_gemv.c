/* GEMV_TILE, GEMM_TILE (fp, int8 and int4 weights) and DEQUANT, on small
 * matrices whose products are exact in fp32. */
#include "test_inst_util.h"

/* W = [[1, 0, -1], [2, 1, 0.5]] (torch Linear layout [N_out, K_in]). */
static float weight[6] = {1, 0, -1, 2, 1, 0.5f};

static AmkInstParams gemv_params(int k, int n_tile, int n_off) {
  AmkInstParams p = {0};
  set_int(&p, "K", k);
  set_int(&p, "N_tile", n_tile);
  set_int(&p, "n_off", n_off);
  return p;
}

static void test_fp_gemv(UnitCounts *c) {
  char err[160];
  float x[3] = {1, 2, 3}, out[2] = {99, 99};
  AmkTensorView in[2] = {view2(x, AMK_DTYPE_F32, 1, 3),
                         view2(weight, AMK_DTYPE_F32, 2, 3)};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 1, 2);

  /* Tile [1, 2): only column 1 is written: 2 + 2 + 1.5. */
  AmkInstParams p = gemv_params(3, 1, 1);
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, in, 2, &o, 0);
  CHECK(c, out[0] == 99.0f && out[1] == 5.5f);
  p = gemv_params(3, 2, 0);
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, in, 2, &o, 0);
  CHECK(c, out[0] == -2.0f && out[1] == 5.5f); /* 1 - 3 */

  /* A bias adds after the dot product. */
  float bias[2] = {10, 20};
  AmkTensorView with_bias[3] = {in[0], in[1], view1(bias, AMK_DTYPE_F32, 2)};
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, with_bias, 3, &o, 0);
  CHECK(c, out[0] == 8.0f && out[1] == 25.5f);

  /* Two rows of x: every row is computed. */
  float x2[6] = {1, 2, 3, 0, 1, 0}, out2[4];
  AmkTensorView in2[2] = {view2(x2, AMK_DTYPE_F32, 2, 3), in[1]};
  AmkTensorView o2 = view2(out2, AMK_DTYPE_F32, 2, 2);
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, in2, 2, &o2, 0);
  CHECK(c, out2[0] == -2.0f && out2[1] == 5.5f && out2[2] == 0.0f &&
               out2[3] == 1.0f);

  /* bf16 x widens exactly: 0x3f81 = 1.0078125. */
  uint16_t xb[3] = {0x3f81, 0, 0};
  AmkTensorView inb[2] = {view2(xb, AMK_DTYPE_BF16, 1, 3), in[1]};
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, inb, 2, &o, 0);
  CHECK(c, out[0] == 1.0078125f && out[1] == 2.015625f);
}

static void test_gemm_tile(UnitCounts *c) {
  char err[160];
  float x[6] = {1, 2, 3, 0, 1, 0};
  float out[4] = {99, 99, 99, 99};
  AmkTensorView in[2] = {view2(x, AMK_DTYPE_F32, 2, 3),
                         view2(weight, AMK_DTYPE_F32, 2, 3)};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 2, 2);
  AmkInstParams p = gemv_params(3, 2, 0);
  set_int(&p, "M_tile", 1);
  set_int(&p, "m_off", 1);
  CHECK_RUN(c, AMK_OP_GEMM_TILE, &p, in, 2, &o, 0);
  CHECK(c, out[0] == 99.0f && out[1] == 99.0f && out[2] == 0.0f &&
               out[3] == 1.0f);
  set_int(&p, "M_tile", 2); /* rows [1, 3) of 2 */
  CHECK_RUN(c, AMK_OP_GEMM_TILE, &p, in, 2, &o, AMK_INST_ERR_SHAPE);
  AmkInstParams no_m = gemv_params(3, 2, 0);
  CHECK_RUN(c, AMK_OP_GEMM_TILE, &no_m, in, 2, &o, AMK_INST_ERR_PARAM);
}

/* Quantized W: K = 3, group = 2 (two groups, the second ragged),
 * scales (f16) [[0.5, 2], [0.25, 1]]. */
static uint16_t scales_f16[4] = {0x3800, 0x4000, 0x3400, 0x3c00};

static AmkInstParams quantized_params(int n_tile, int n_off, int qdtype) {
  AmkInstParams p = gemv_params(3, n_tile, n_off);
  set_int(&p, "qdtype", qdtype);
  set_int(&p, "group", 2);
  return p;
}

/* The whole-tile GEMV of x [1, 3] times the quantized `w` ([2, 3] as stored)
 * with scales_f16, into out [1, 2]: its inputs, output view and params. */
static void quantized_gemv(AmkTensorView in[3], AmkTensorView *o, AmkInstParams *p, float *x,
                           AmkTensorView w, float *out, int qdtype) {
  in[0] = view2(x, AMK_DTYPE_F32, 1, 3);
  in[1] = w;
  in[2] = view2(scales_f16, AMK_DTYPE_F16, 2, 2);
  *o = view2(out, AMK_DTYPE_F32, 1, 2);
  *p = quantized_params(2, 0, qdtype);
}

static void test_int8_gemv(UnitCounts *c) {
  char err[160];
  /* q = [[1, -2, 3], [-128, 127, 0]] -> W = [[0.5, -1, 6], [-32, 31.75, 0]] */
  int8_t q[6] = {1, -2, 3, -128, 127, 0};
  float x[3] = {1, 2, 3}, out[2] = {0, 0};
  AmkTensorView in[3], o;
  AmkInstParams p;
  quantized_gemv(in, &o, &p, x, view2(q, AMK_DTYPE_I8, 2, 3), out, 6);
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, in, 3, &o, 0);
  CHECK(c, out[0] == 16.5f && out[1] == 31.5f); /* 0.5-2+18, -32+63.5 */

  /* Errors: no scales; int8 weights not stored as i8; scales of the wrong
   * width (ceil(3/2) = 2 columns wanted). */
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, in, 2, &o, AMK_INST_ERR_ARITY);
  AmkTensorView as_u8[3] = {in[0], view2(q, AMK_DTYPE_U8, 2, 3), in[2]};
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, as_u8, 3, &o, AMK_INST_ERR_DTYPE);
  AmkTensorView narrow[3] = {in[0], in[1],
                             view2(scales_f16, AMK_DTYPE_F16, 4, 1)};
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, narrow, 3, &o, AMK_INST_ERR_SHAPE);
}

static void test_int4_gemv(UnitCounts *c) {
  char err[160];
  /* q = [[1, -2, 3], [-8, 7, 0]] stored as q + 8 = [[9, 6, 11], [0, 15, 8]];
   * column 2b in the low nibble of byte b, rows padded to 2 bytes. */
  uint8_t packed[4] = {0x69, 0x0b, 0xf0, 0x08};
  float x[3] = {1, 2, 3}, out[2] = {99, 99};
  AmkTensorView in[3], o;
  AmkInstParams p;
  quantized_gemv(in, &o, &p, x, view2(packed, AMK_DTYPE_U8, 2, 2), out, 7);
  /* W = [[0.5, -1, 6], [-2, 1.75, 0]]: 0.5 - 2 + 18, -2 + 3.5 */
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, in, 3, &o, 0);
  CHECK(c, out[0] == 16.5f && out[1] == 1.5f);
  /* A swapped nibble order would read row 0 as [-2, 1, 3]: 9.5, not 16.5. */

  AmkInstParams tile = quantized_params(1, 1, 7);
  out[0] = out[1] = 99;
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &tile, in, 3, &o, 0);
  CHECK(c, out[0] == 99.0f && out[1] == 1.5f);

  /* An i4 view [1, 2] is one byte: 0x0f = columns [15, 0] - 8 = [7, -8]. */
  uint8_t one_byte[1] = {0x0f};
  uint16_t unit_scale[1] = {0x3c00};
  float x2[2] = {1, 1}, out1[1];
  AmkTensorView in4[3] = {view2(x2, AMK_DTYPE_F32, 1, 2),
                          view2(one_byte, AMK_DTYPE_I4, 1, 2),
                          view2(unit_scale, AMK_DTYPE_F16, 1, 1)};
  AmkTensorView o1 = view2(out1, AMK_DTYPE_F32, 1, 1);
  AmkInstParams p2 = gemv_params(2, 1, 0);
  set_int(&p2, "qdtype", 7); /* group defaults to K */
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p2, in4, 3, &o1, 0);
  CHECK(c, out1[0] == -1.0f);

  /* Too few packed bytes for 2 rows of ceil(3/2). */
  AmkTensorView short_q[3] = {in[0], view2(packed, AMK_DTYPE_U8, 2, 1), in[2]};
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, short_q, 3, &o, AMK_INST_ERR_SHAPE);
}

static void test_gemv_errors(UnitCounts *c) {
  char err[160];
  float x[3] = {1, 2, 3}, out[2];
  AmkTensorView in[2] = {view2(x, AMK_DTYPE_F32, 1, 3),
                         view2(weight, AMK_DTYPE_F32, 2, 3)};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 1, 2);
  AmkInstParams p = gemv_params(4, 2, 0); /* K = 4 does not divide x */
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, in, 2, &o, AMK_INST_ERR_SHAPE);
  CHECK(c, strstr(err, "gemv_tile: K = 4") == err);
  AmkTensorView wide_w[2] = {in[0], view2(weight, AMK_DTYPE_F32, 3, 2)};
  p = gemv_params(3, 2, 0); /* weight rows of 2 columns, K = 3 */
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, wide_w, 2, &o, AMK_INST_ERR_SHAPE);
  p = gemv_params(3, 2, 1); /* [1, 3) past the 2 rows */
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, in, 2, &o, AMK_INST_ERR_SHAPE);
  p = gemv_params(3, 2, -1);
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, in, 2, &o, AMK_INST_ERR_SHAPE);
  AmkTensorView o3 = view2(out, AMK_DTYPE_F32, 1, 1);
  p = gemv_params(3, 2, 0); /* output narrower than the tile */
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, in, 2, &o3, AMK_INST_ERR_SHAPE);
  AmkInstParams missing = {0};
  set_int(&missing, "K", 3);
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &missing, in, 2, &o, AMK_INST_ERR_PARAM);
}

static void test_dequant(UnitCounts *c) {
  char err[160];
  uint8_t packed[4] = {0x69, 0x0b, 0xf0, 0x08};
  float out[6];
  AmkTensorView in[3] = {view2(packed, AMK_DTYPE_U8, 2, 2),
                         view2(scales_f16, AMK_DTYPE_F16, 2, 2), {0}};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 2, 3);
  AmkInstParams p = {0};
  set_int(&p, "qdtype", 7);
  set_int(&p, "group", 2);
  CHECK_RUN(c, AMK_OP_DEQUANT, &p, in, 2, &o, 0);
  const float want[6] = {0.5f, -1, 6, -2, 1.75f, 0};
  CHECK(c, memcmp(out, want, sizeof want) == 0);

  /* To bf16 (all exact): 0.5 0x3f00, -1 0xbf80, 6 0x40c0, -2 0xc000,
   * 1.75 0x3fe0, 0. */
  uint16_t bf[6];
  AmkTensorView bo = view2(bf, AMK_DTYPE_BF16, 2, 3);
  CHECK_RUN(c, AMK_OP_DEQUANT, &p, in, 2, &bo, 0);
  CHECK(c, bf[0] == 0x3f00 && bf[1] == 0xbf80 && bf[2] == 0x40c0 &&
               bf[3] == 0xc000 && bf[4] == 0x3fe0 && bf[5] == 0);

  /* Zero-points: (q - z) * s with z = [[1, 0], [0, 0]]. */
  float zeros[4] = {1, 0, 0, 0};
  in[2] = view2(zeros, AMK_DTYPE_F32, 2, 2);
  CHECK_RUN(c, AMK_OP_DEQUANT, &p, in, 3, &o, 0);
  CHECK(c, out[0] == 0.0f && out[1] == -1.5f && out[2] == 6.0f &&
               out[3] == -2.0f);

  /* int8 */
  int8_t q8[6] = {1, -2, 3, -128, 127, 0};
  AmkTensorView in8[2] = {view2(q8, AMK_DTYPE_I8, 2, 3), in[1]};
  set_int(&p, "qdtype", 6);
  CHECK_RUN(c, AMK_OP_DEQUANT, &p, in8, 2, &o, 0);
  CHECK(c, out[3] == -32.0f && out[4] == 31.75f && out[5] == 0.0f);

  /* Output of 4 columns: ceil(4/2) = 2 groups fit, but 2 x 4 bytes do not. */
  float out8[8];
  AmkTensorView wide = view2(out8, AMK_DTYPE_F32, 2, 4);
  CHECK_RUN(c, AMK_OP_DEQUANT, &p, in8, 2, &wide, AMK_INST_ERR_SHAPE);
  set_int(&p, "qdtype", 5);
  CHECK_RUN(c, AMK_OP_DEQUANT, &p, in8, 2, &o, AMK_INST_ERR_PARAM);
}

UNIT_MAIN("test_inst_gemv", test_fp_gemv, test_gemm_tile, test_int8_gemv,
          test_int4_gemv, test_gemv_errors, test_dequant)
