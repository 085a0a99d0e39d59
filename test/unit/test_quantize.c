/* The row quantizer (support/quantize.c) against hand-computed rows, and
 * against the kernels: DEQUANT of what it writes gives q * scale. */
#include <math.h>

#include "amk/quantize.h"
#include "test_inst_util.h"

static float f16(uint16_t h) { return amk_f16_to_f32(h); }

static void test_sizes(UnitCounts *c) {
  CHECK(c, amk_quant_qmax(8) == 127 && amk_quant_qmax(4) == 7 && amk_quant_qmax(3) == 0);
  CHECK(c, amk_quant_row_bytes(8, 5) == 5 && amk_quant_row_bytes(4, 5) == 3 &&
               amk_quant_row_bytes(4, 6) == 3);
  CHECK(c, amk_quant_groups(256, 128) == 2 && amk_quant_groups(257, 128) == 3 &&
               amk_quant_groups(64, 128) == 1 && amk_quant_groups(1, 1) == 1);
}

/* absmax 127 gives scale 1, so w / scale is w: halves round to even. */
static void test_int8_ties(UnitCounts *c) {
  float w[8] = {127, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.5f, -127};
  uint8_t q[8];
  uint16_t s[1];
  CHECK(c, amk_quantize_row(w, 8, 8, 128, q, s));
  CHECK(c, f16(s[0]) == 1.0f);
  const int8_t want[8] = {127, 2, 4, -2, 0, 0, 2, -127};
  CHECK(c, memcmp(q, want, sizeof want) == 0);
}

/* Scale = absmax / qmax in fp32, q = rint(w / scale): 100 / 127 and
 * 0.3 / (100 / 127) land where fp32 puts them, not where doubles would. */
static void test_int8_scale(UnitCounts *c) {
  float w[3] = {100, 0.3f, -37};
  uint8_t q[3];
  uint16_t s[1];
  CHECK(c, amk_quantize_row(w, 3, 8, 3, q, s));
  float scale = 100.0f / 127.0f;
  CHECK(c, s[0] == amk_f32_to_f16(scale));
  CHECK(c, (int8_t)q[0] == 127 && (int8_t)q[1] == (int8_t)rintf(0.3f / scale) &&
               (int8_t)q[2] == (int8_t)rintf(-37.0f / scale));
}

/* An all-zero group keeps the reference's 1e-8 floor: every q is 0 and its
 * fp16 scale is 0 (below the smallest subnormal), so it dequantizes to 0. */
static void test_zero_group(UnitCounts *c) {
  float w[4] = {0, 0, 0, 0};
  uint8_t q8[4] = {9, 9, 9, 9}, q4[2] = {9, 9};
  uint16_t s[2] = {9, 9};
  CHECK(c, amk_quantize_row(w, 4, 8, 2, q8, s));
  CHECK(c, q8[0] == 0 && q8[3] == 0 && s[0] == 0 && s[1] == 0);
  CHECK(c, amk_quantize_row(w, 4, 4, 2, q4, s));
  CHECK(c, q4[0] == 0x88 && q4[1] == 0x88 && s[0] == 0);
}

/* K = 5, group 2: groups [0, 2), [2, 4), [4, 5) each with their own scale. */
static void test_ragged_groups(UnitCounts *c) {
  float w[5] = {1, -0.5f, 8, 4, -3};
  uint8_t q[5];
  uint16_t s[3];
  CHECK(c, amk_quantize_row(w, 5, 8, 2, q, s));
  CHECK(c, s[0] == amk_f32_to_f16(1.0f / 127) && s[1] == amk_f32_to_f16(8.0f / 127) &&
               s[2] == amk_f32_to_f16(3.0f / 127));
  CHECK(c, (int8_t)q[0] == 127 && (int8_t)q[2] == 127 && (int8_t)q[4] == -127);
  CHECK(c, (int8_t)q[1] == (int8_t)rintf(-0.5f / (1.0f / 127)) &&
               (int8_t)q[3] == (int8_t)rintf(4.0f / (8.0f / 127)));
  /* A group wider than the row is one group. */
  uint16_t one[1];
  CHECK(c, amk_quantize_row(w, 5, 8, 128, q, one) && one[0] == amk_f32_to_f16(8.0f / 127));
}

/* int4: q + 8 nibbles, column 2b low, 2b + 1 high; an odd row's last high
 * nibble is 0. absmax 7 gives scale 1. */
static void test_int4_packing(UnitCounts *c) {
  float w[5] = {7, -7, 2.5f, -3.5f, 1};
  uint8_t q[3];
  uint16_t s[1];
  CHECK(c, amk_quantize_row(w, 5, 4, 128, q, s));
  CHECK(c, f16(s[0]) == 1.0f);
  /* levels 7, -7, 2, -4, 1 -> nibbles 15, 1, 10, 4, 9 */
  CHECK(c, q[0] == 0x1f && q[1] == 0x4a && q[2] == 0x09);
  /* The absmax maps to -7, never -8: |w| / scale <= 7. */
  float edge[2] = {-7.6f, 7};
  uint8_t qe[1];
  CHECK(c, amk_quantize_row(edge, 2, 4, 2, qe, s));
  CHECK(c, s[0] == amk_f32_to_f16(7.6f / 7) && qe[0] == 0xe1);
}

static void test_refusals(UnitCounts *c) {
  uint8_t q[2];
  uint16_t s[2];
  float nan_row[2] = {1, NAN}, inf_row[2] = {INFINITY, 1};
  CHECK(c, !amk_quantize_row(nan_row, 2, 8, 2, q, s));
  CHECK(c, !amk_quantize_row(inf_row, 2, 4, 2, q, s));
  /* A scale above fp16's 65504 (absmax / 7 for int4). */
  float huge[2] = {1e6f, 1};
  CHECK(c, !amk_quantize_row(huge, 2, 4, 2, q, s));
  CHECK(c, amk_quantize_row(huge, 2, 8, 2, q, s)); /* 1e6 / 127 fits */
}

/* The kernels read exactly what the quantizer writes: DEQUANT of a row
 * gives q * fp16(scale) in fp32, within half a step of each weight plus
 * the fp16 rounding of the scale (qmax * 2^-11 steps). */
static void test_kernels_read_it(UnitCounts *c) {
  enum { K = 7, GROUP = 3 };
  float w[2 * K] = {0.1f, -0.25f, 0.9f, -1.5f, 0.03f, 2.0f, -0.7f,
                    5.0f, 4.5f,   -3.f, 0.f,   0.f,   0.f,  1e-3f};
  char err[160];
  for (int bits = 4; bits <= 8; bits += 4) {
    uint8_t q[2 * K];
    uint16_t s[2 * 3];
    int64_t row_bytes = amk_quant_row_bytes(bits, K);
    for (int r = 0; r < 2; r++)
      CHECK(c, amk_quantize_row(w + r * K, K, bits, GROUP, q + r * row_bytes, s + r * 3));
    float out[2 * K];
    AmkTensorView in[2] = {view2(q, bits == 8 ? AMK_DTYPE_I8 : AMK_DTYPE_U8, 2, row_bytes),
                           view2(s, AMK_DTYPE_F16, 2, 3)};
    AmkTensorView o = view2(out, AMK_DTYPE_F32, 2, K);
    AmkInstParams p = {0};
    set_int(&p, "qdtype", bits == 8 ? 6 : 7);
    set_int(&p, "group", GROUP);
    CHECK_RUN(c, AMK_OP_DEQUANT, &p, in, 2, &o, 0);
    int bad = 0;
    for (int r = 0; r < 2; r++)
      for (int k = 0; k < K; k++) {
        float scale = f16(s[r * 3 + k / GROUP]);
        bad += fabsf(out[r * K + k] - w[r * K + k]) > 0.6f * scale + 1e-6f;
      }
    CHECK(c, bad == 0);
  }
}

UNIT_MAIN("test_quantize", test_sizes, test_int8_ties, test_int8_scale, test_zero_group,
          test_ragged_groups, test_int4_packing, test_refusals, test_kernels_read_it)
