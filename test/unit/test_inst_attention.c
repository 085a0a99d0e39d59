/* ATTENTION_TILE (whole and split-KV partial) and ATTENTION_COMBINE.
 * Expected values from python3's math module on the formulas. */
#include "test_inst_util.h"

static AmkInstParams attention_params(int head_dim, int n_heads, int n_kv,
                                      int kv_start, int kv_len, double scale) {
  AmkInstParams p = {0};
  set_int(&p, "head_dim", head_dim);
  set_int(&p, "n_heads", n_heads);
  set_int(&p, "n_kv_heads", n_kv);
  set_int(&p, "kv_start", kv_start);
  set_int(&p, "kv_len", kv_len);
  set_float(&p, "scale", scale);
  return p;
}

static const double inv_sqrt2 = 0.7071067811865475;

/* One head, head_dim 2, q = [1, 0], keys [1, 0] and [0, 1], values [1, 2]
 * and [3, 4]: scores [1/sqrt2, 0], w = e^-(1/sqrt2);
 * out = ([1, 2] + w [3, 4]) / (1 + w) = [1.66047690, 2.66047690]. */
static float q1[2] = {1, 0};
static float k2[4] = {1, 0, 0, 1};
static float v2[4] = {1, 2, 3, 4};

static void two_key_inputs(AmkTensorView in[3]) {
  in[0] = view2(q1, AMK_DTYPE_F32, 1, 2);
  in[1] = view3(k2, AMK_DTYPE_F32, 2, 1, 2);
  in[2] = view3(v2, AMK_DTYPE_F32, 2, 1, 2);
}

static void test_two_keys(UnitCounts *c) {
  char err[160];
  float out[4];
  AmkTensorView in[3];
  two_key_inputs(in);
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 1, 2);
  AmkInstParams p = attention_params(2, 1, 1, 0, 2, inv_sqrt2);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p, in, 3, &o, 0);
  CHECK(c, near(out[0], 1.6604769013466862, 1e-6));
  CHECK(c, near(out[1], 2.6604769013466862, 1e-6));

  /* Partial: acc = [1 + 3w, 2 + 4w], m = 1/sqrt2, l = 1 + w. */
  set_int(&p, "flags", 2);
  AmkTensorView po = view2(out, AMK_DTYPE_F32, 1, 4);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p, in, 3, &po, 0);
  CHECK(c, near(out[0], 2.4792060741857194, 1e-6));
  CHECK(c, near(out[1], 3.972274765580959, 1e-6));
  CHECK(c, near(out[2], inv_sqrt2, 1e-6));
  CHECK(c, near(out[3], 1.4930686913952398, 1e-6));

  /* A window of one key gives that key's value exactly: [kv_start 1, 1). */
  AmkInstParams one = attention_params(2, 1, 1, 1, 1, inv_sqrt2);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &one, in, 3, &o, 0);
  CHECK(c, out[0] == 3.0f && out[1] == 4.0f);

  /* A 4th input is accepted and ignored, as the reference does. */
  AmkTensorView four[4] = {in[0], in[1], in[2], in[0]};
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &one, four, 4, &o, 0);
  CHECK(c, out[0] == 3.0f && out[1] == 4.0f);
}

/* GQA: 4 query heads over 2 kv heads; heads 0, 1 read kv head 0 and heads
 * 2, 3 read kv head 1. With one key each output is its kv head's value. */
static void test_gqa(UnitCounts *c) {
  char err[160];
  float q[8] = {1, 0, 0, 1, 1, 1, -1, 0};
  float k[4] = {1, 2, 3, 4};        /* [1, 2, 2] */
  float v[4] = {10, 20, 30, 40};    /* kv head 0: [10, 20], 1: [30, 40] */
  float out[8];
  AmkTensorView in[3] = {view2(q, AMK_DTYPE_F32, 1, 8),
                         view3(k, AMK_DTYPE_F32, 1, 2, 2),
                         view3(v, AMK_DTYPE_F32, 1, 2, 2)};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 1, 8);
  AmkInstParams p = attention_params(2, 4, 2, 0, 1, inv_sqrt2);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p, in, 3, &o, 0);
  const float want[8] = {10, 20, 10, 20, 30, 40, 30, 40};
  CHECK(c, memcmp(out, want, sizeof want) == 0);
}

/* The two keys of test_two_keys as two partials, one key each, then the
 * combine: it reproduces the whole-window output. */
static void test_combine(UnitCounts *c) {
  char err[160];
  float part0[4], part1[4], out[2];
  AmkTensorView in[3];
  two_key_inputs(in);
  AmkInstParams p0 = attention_params(2, 1, 1, 0, 1, inv_sqrt2);
  AmkInstParams p1 = attention_params(2, 1, 1, 1, 1, inv_sqrt2);
  set_int(&p0, "flags", 2);
  set_int(&p1, "flags", 3); /* bit 0 (causal) changes nothing for decode */
  AmkTensorView o0 = view2(part0, AMK_DTYPE_F32, 1, 4);
  AmkTensorView o1 = view2(part1, AMK_DTYPE_F32, 1, 4);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p0, in, 3, &o0, 0);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p1, in, 3, &o1, 0);
  /* acc | m | l for one key: the value, its score, 1. */
  CHECK(c, part0[0] == 1 && part0[1] == 2 && near(part0[2], inv_sqrt2, 1e-7) &&
               part0[3] == 1);
  CHECK(c, part1[0] == 3 && part1[1] == 4 && part1[2] == 0 && part1[3] == 1);

  AmkInstParams none = {0};
  AmkTensorView parts[3] = {o0, o1, {0}};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 1, 2);
  CHECK_RUN(c, AMK_OP_ATTENTION_COMBINE, &none, parts, 2, &o, 0);
  CHECK(c, near(out[0], 1.6604769013466862, 1e-6));
  CHECK(c, near(out[1], 2.6604769013466862, 1e-6));

  /* An empty shard (kv_len 0) writes acc 0, m -inf, l 0 and gets zero
   * weight: combining it changes nothing. */
  float empty[4] = {5, 5, 5, 5};
  AmkInstParams pe = attention_params(2, 1, 1, 2, 0, inv_sqrt2);
  set_int(&pe, "flags", 2);
  AmkTensorView oe = view2(empty, AMK_DTYPE_F32, 1, 4);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &pe, in, 3, &oe, 0);
  CHECK(c, empty[0] == 0 && empty[1] == 0 && isinf(empty[2]) && empty[2] < 0 &&
               empty[3] == 0);
  parts[2] = oe;
  float out3[2];
  AmkTensorView o3 = view2(out3, AMK_DTYPE_F32, 1, 2);
  set_int(&none, "head_dim", 2);
  CHECK_RUN(c, AMK_OP_ATTENTION_COMBINE, &none, parts, 3, &o3, 0);
  CHECK(c, out3[0] == out[0] && out3[1] == out[1]);

  /* Hand partials, equal maxima: acc [2, 4] l 2 and acc [6, 8] l 2:
   * out = [8, 12] / 4 = [2, 3]. */
  float a[4] = {2, 4, 1, 2}, b[4] = {6, 8, 1, 2}, hand[2];
  AmkTensorView hp[2] = {view2(a, AMK_DTYPE_F32, 1, 4), view2(b, AMK_DTYPE_F32, 1, 4)};
  AmkTensorView ho = view2(hand, AMK_DTYPE_F32, 1, 2);
  CHECK_RUN(c, AMK_OP_ATTENTION_COMBINE, &none, hp, 2, &ho, 0);
  CHECK(c, hand[0] == 2.0f && hand[1] == 3.0f);
  /* Only empty shards: 0 / max(0, 1e-20) = 0. */
  AmkTensorView only_empty[2] = {oe, oe};
  CHECK_RUN(c, AMK_OP_ATTENTION_COMBINE, &none, only_empty, 2, &ho, 0);
  CHECK(c, hand[0] == 0.0f && hand[1] == 0.0f);

  /* head_dim 3 does not fit partials of 4. */
  set_int(&none, "head_dim", 3);
  CHECK_RUN(c, AMK_OP_ATTENTION_COMBINE, &none, hp, 2, &ho, AMK_INST_ERR_SHAPE);
  AmkInstParams derived = {0};
  AmkTensorView uneven[2] = {hp[0], view2(b, AMK_DTYPE_F32, 1, 3)};
  CHECK_RUN(c, AMK_OP_ATTENTION_COMBINE, &derived, uneven, 2, &ho,
            AMK_INST_ERR_SHAPE);
}

static void test_attention_errors(UnitCounts *c) {
  char err[160];
  float out[4];
  AmkTensorView in[3];
  two_key_inputs(in);
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 1, 2);
  AmkInstParams p = attention_params(2, 1, 1, 1, 2, inv_sqrt2); /* [1, 3) of 2 */
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p, in, 3, &o, AMK_INST_ERR_INDEX);
  CHECK(c, strstr(err, "window [1, 3)") != NULL);
  p = attention_params(2, 1, 1, -1, 1, inv_sqrt2);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p, in, 3, &o, AMK_INST_ERR_INDEX);
  p = attention_params(2, 3, 2, 0, 1, inv_sqrt2); /* 2 does not divide 3 */
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p, in, 3, &o, AMK_INST_ERR_PARAM);
  p = attention_params(2, 2, 1, 0, 1, inv_sqrt2); /* q has 2, not 4 */
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p, in, 3, &o, AMK_INST_ERR_SHAPE);
  p = attention_params(2, 1, 1, 0, 2, inv_sqrt2);
  set_int(&p, "flags", 2); /* a partial needs 4 outputs, not 2 */
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p, in, 3, &o, AMK_INST_ERR_SHAPE);
  AmkTensorView short_v[3] = {in[0], in[1], view3(v2, AMK_DTYPE_F32, 1, 1, 2)};
  p = attention_params(2, 1, 1, 0, 1, inv_sqrt2);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p, short_v, 3, &o, AMK_INST_ERR_SHAPE);
  AmkInstParams no_scale = {0};
  set_int(&no_scale, "head_dim", 2);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &no_scale, in, 3, &o, AMK_INST_ERR_PARAM);
}

/* Two query rows (a prefill chunk at pos 0 of the two-key cache), both
 * q = [1, 0]. Causal (flags bit 0): row 0 reads key 0 alone -> v0 = [1, 2];
 * row 1 reads both -> [1.66047690, 2.66047690] (test_two_keys). Without
 * the bit both rows read both keys. */
static void test_multi_row(UnitCounts *c) {
  char err[160];
  float q[4] = {1, 0, 1, 0};
  float out[4];
  AmkTensorView in[3];
  two_key_inputs(in);
  in[0] = view2(q, AMK_DTYPE_F32, 2, 2);
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 2, 2);
  AmkInstParams p = attention_params(2, 1, 1, 0, 2, inv_sqrt2);
  set_int(&p, "flags", 1);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p, in, 3, &o, 0);
  CHECK(c, out[0] == 1.0f && out[1] == 2.0f);
  CHECK(c, near(out[2], 1.6604769013466862, 1e-6));
  CHECK(c, near(out[3], 2.6604769013466862, 1e-6));
  set_int(&p, "flags", 0);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p, in, 3, &o, 0);
  CHECK(c, near(out[0], 1.6604769013466862, 1e-6) && near(out[1], 2.6604769013466862, 1e-6));
  CHECK(c, out[2] == out[0] && out[3] == out[1]);
  /* The window [1, 2) at rows 2: row 0's window ends before key 1 (empty:
   * 0), row 1 reads key 1 alone -> v1 = [3, 4]. */
  AmkInstParams late = attention_params(2, 1, 1, 1, 1, inv_sqrt2);
  set_int(&late, "flags", 1);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &late, in, 3, &o, 0);
  CHECK(c, out[0] == 0.0f && out[1] == 0.0f && out[2] == 3.0f && out[3] == 4.0f);
  /* The output has as many rows as q; a partial takes one row. */
  AmkTensorView one_row = view2(out, AMK_DTYPE_F32, 1, 2);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p, in, 3, &one_row, AMK_INST_ERR_SHAPE);
  CHECK(c, strstr(err, "2 query rows") != NULL);
  set_int(&p, "flags", 2);
  AmkTensorView po = view2(out, AMK_DTYPE_F32, 1, 4);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p, in, 3, &po, AMK_INST_ERR_SHAPE);
  /* q of 3 elements is no whole row of 2. */
  in[0] = view2(q, AMK_DTYPE_F32, 1, 3);
  set_int(&p, "flags", 1);
  CHECK_RUN(c, AMK_OP_ATTENTION_TILE, &p, in, 3, &o, AMK_INST_ERR_SHAPE);
}

UNIT_MAIN("test_inst_attention", test_two_keys, test_gqa, test_combine,
          test_attention_errors, test_multi_row)
