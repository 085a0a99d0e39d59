/* The instruction API: param decoding, views, dispatch checks, NOP, COPY
 * and the cast of fp32 results into 16-bit output buffers. */
#include "test_inst_util.h"

static void test_params_from_task(UnitCounts *c) {
  AmkValue recipe = {.kind = AMK_VALUE_OBJECT};
  AmkParam params[] = {
      {"K", amk_value_int(3)},         {"eps", amk_value_float(1e-5)},
      {"recipe", recipe},              {"label_like", amk_value_int(9)},
      {"N", amk_value_float(4.0)},     {"theta", amk_value_int(500000)},
  };
  AmkTask task = {.op = AMK_OP_GEMV_TILE, .n_params = 6, .params = params};
  AmkInstParams p;
  char err[128];
  CHECK(c, amk_inst_params_from_task(&task, &p, err, sizeof err) == 0);
  CHECK(c, p.K.i == 3 && amk_inst_param_has(&p, AMK_PARAM_K));
  CHECK(c, p.N.i == 4 && amk_inst_param_has(&p, AMK_PARAM_N));
  CHECK(c, p.eps.f == 1e-5f && amk_inst_param_has(&p, AMK_PARAM_eps));
  CHECK(c, p.theta.f == 500000.0f);
  CHECK(c, !amk_inst_param_has(&p, AMK_PARAM_N_tile));
  CHECK(c, p.present == (AMK_PARAM_BIT(K) | AMK_PARAM_BIT(N) |
                         AMK_PARAM_BIT(eps) | AMK_PARAM_BIT(theta)));
}

static void test_params_errors(UnitCounts *c) {
  AmkInstParams p = {0};
  char err[128];
  AmkValue half = amk_value_float(4.5);
  CHECK(c, amk_inst_params_set(&p, "K", &half, err, sizeof err) ==
               AMK_INST_ERR_PARAM);
  CHECK(c, strstr(err, "'K'") != NULL);
  AmkValue huge = amk_value_int(1LL << 31);
  CHECK(c, amk_inst_params_set(&p, "pos", &huge, err, sizeof err) ==
               AMK_INST_ERR_PARAM);
  AmkValue text = {.kind = AMK_VALUE_STRING};
  text.as.s = "1e-5";
  CHECK(c, amk_inst_params_set(&p, "eps", &text, err, sizeof err) ==
               AMK_INST_ERR_PARAM);
  CHECK(c, p.present == 0);
  AmkValue neg = amk_value_int(INT32_MIN);
  CHECK(c, amk_inst_params_set(&p, "kv_start", &neg, err, sizeof err) == 0);
  CHECK(c, p.kv_start.i == INT32_MIN);
}

static void test_params_from_object(UnitCounts *c) {
  AmkMember members[] = {{"head_dim", amk_value_int(16)},
                         {"scale", amk_value_float(0.25)}};
  AmkValue obj = {.kind = AMK_VALUE_OBJECT, .count = 2};
  obj.as.members = members;
  AmkInstParams p;
  CHECK(c, amk_inst_params_from_object(&obj, &p, NULL, 0) == 0);
  CHECK(c, p.head_dim.i == 16 && p.scale.f == 0.25f);
  AmkValue list = {.kind = AMK_VALUE_LIST};
  CHECK(c, amk_inst_params_from_object(&list, &p, NULL, 0) ==
               AMK_INST_ERR_PARAM);
}

static void test_views(UnitCounts *c) {
  float buf[6];
  AmkTensorView v = view2(buf, AMK_DTYPE_F32, 2, 3);
  CHECK(c, v.numel == 6 && v.rank == 2 && v.shape[1] == 3);
  int64_t five[5] = {1, 1, 1, 1, 1};
  CHECK(c, amk_tensor_view(buf, AMK_DTYPE_F32, 5, five).numel == -1);
  int64_t negative[2] = {2, -1};
  CHECK(c, amk_tensor_view(buf, AMK_DTYPE_F32, 2, negative).numel == -1);
  CHECK(c, amk_tensor_view(buf, AMK_DTYPE_F32, 0, NULL).numel == 1);
}

static void test_dispatch_errors(UnitCounts *c) {
  float a[2] = {1, 2}, b[2] = {3, 4}, out[2] = {0, 0};
  AmkTensorView in[2] = {view1(a, AMK_DTYPE_F32, 2), view1(b, AMK_DTYPE_F32, 2)};
  AmkTensorView o = view1(out, AMK_DTYPE_F32, 2);
  AmkInstParams p = {0};
  char err[160];

  CHECK(c, amk_inst_execute((AmkOp)AMK_OP_COUNT, &p, in, 2, &o, 1, NULL, err,
                            sizeof err) == AMK_INST_ERR_OPCODE);
  CHECK_RUN(c, AMK_OP_ADD, &p, in, 1, &o, AMK_INST_ERR_ARITY);
  CHECK(c, strncmp(err, "add: ", 5) == 0);
  CHECK(c, amk_inst_execute(AMK_OP_ADD, &p, in, 2, &o, 0, NULL, err,
                            sizeof err) == AMK_INST_ERR_ARITY);

  AmkTensorView lying = in[1];
  lying.numel = 3; /* not the product of its dims */
  AmkTensorView bad_in[2] = {in[0], lying};
  CHECK_RUN(c, AMK_OP_ADD, &p, bad_in, 2, &o, AMK_INST_ERR_SHAPE);
  AmkTensorView no_data[2] = {in[0], view1(NULL, AMK_DTYPE_F32, 2)};
  CHECK_RUN(c, AMK_OP_ADD, &p, no_data, 2, &o, AMK_INST_ERR_SHAPE);
  AmkTensorView fp8[2] = {in[0], view1(b, AMK_DTYPE_F8E4M3, 2)};
  CHECK_RUN(c, AMK_OP_ADD, &p, fp8, 2, &o, AMK_INST_ERR_DTYPE);
  CHECK(c, out[0] == 0 && out[1] == 0); /* nothing written on failure */

  /* A NULL err buffer is allowed. */
  CHECK(c, run_op(AMK_OP_ADD, &p, in, 1, &o, NULL, 0) == AMK_INST_ERR_ARITY);
  /* NOP takes nothing and does nothing. */
  CHECK(c, amk_inst_execute(AMK_OP_NOP, NULL, NULL, 0, NULL, 0, NULL, err,
                            sizeof err) == 0);
  CHECK(c, amk_inst_execute(AMK_OP_NOP, NULL, in, 1, NULL, 0, NULL, err,
                            sizeof err) == AMK_INST_ERR_ARITY);
}

static void test_copy(UnitCounts *c) {
  AmkInstParams p = {0};
  char err[160];
  /* Same dtype: bytes, NaN payloads included. */
  uint32_t src_bits[3] = {0x3f800000u, 0x7fc12345u, 0x80000000u};
  uint32_t dst_bits[3] = {0};
  AmkTensorView in = view1(src_bits, AMK_DTYPE_F32, 3);
  AmkTensorView out = view1(dst_bits, AMK_DTYPE_F32, 3);
  CHECK_RUN(c, AMK_OP_COPY, &p, &in, 1, &out, 0);
  CHECK(c, same_bits(src_bits, dst_bits, sizeof src_bits));

  /* Packed int4: 4 elements in 2 bytes, copied as bytes. */
  uint8_t packed[2] = {0x9f, 0x21}, packed_out[2] = {0, 0};
  AmkTensorView in4 = view1(packed, AMK_DTYPE_I4, 4);
  AmkTensorView out4 = view1(packed_out, AMK_DTYPE_I4, 4);
  CHECK_RUN(c, AMK_OP_COPY, &p, &in4, 1, &out4, 0);
  CHECK(c, packed_out[0] == 0x9f && packed_out[1] == 0x21);

  /* fp32 -> i32 truncates toward zero. */
  float f[3] = {2.7f, -2.7f, 5.0f};
  int32_t ints[3] = {0};
  AmkTensorView fin = view1(f, AMK_DTYPE_F32, 3);
  AmkTensorView iout = view1(ints, AMK_DTYPE_I32, 3);
  CHECK_RUN(c, AMK_OP_COPY, &p, &fin, 1, &iout, 0);
  CHECK(c, ints[0] == 2 && ints[1] == -2 && ints[2] == 5);

  /* bf16 widens exactly: 0x3f81 is 1 + 2^-7. */
  uint16_t bf[2] = {0x3f81, 0xc040};
  float wide[2];
  AmkTensorView bin = view1(bf, AMK_DTYPE_BF16, 2);
  AmkTensorView wout = view1(wide, AMK_DTYPE_F32, 2);
  CHECK_RUN(c, AMK_OP_COPY, &p, &bin, 1, &wout, 0);
  CHECK(c, wide[0] == 1.0078125f && wide[1] == -3.0f);

  AmkTensorView short_out = view1(wide, AMK_DTYPE_F32, 1);
  CHECK_RUN(c, AMK_OP_COPY, &p, &bin, 1, &short_out, AMK_INST_ERR_SHAPE);
}

/* A BF16 / F16 program rounds each op's fp32 result to nearest even. */
static void test_half_outputs(UnitCounts *c) {
  AmkInstParams p = {0};
  char err[160];
  const float q = 1.0f / 256.0f; /* 2^-8: half a bf16 ulp at 1 */
  float a[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  float b[4] = {q, 3 * q, q / 2, 3 * q / 2};
  uint16_t out[4];
  AmkTensorView in[2] = {view1(a, AMK_DTYPE_F32, 4), view1(b, AMK_DTYPE_F32, 4)};
  AmkTensorView o = view1(out, AMK_DTYPE_BF16, 4);
  CHECK_RUN(c, AMK_OP_ADD, &p, in, 2, &o, 0);
  CHECK(c, out[0] == 0x3f80); /* 1 + 2^-8: a tie, to the even 1.0 */
  CHECK(c, out[1] == 0x3f82); /* 1 + 3*2^-8: a tie, to the even 1 + 2^-6 */
  CHECK(c, out[2] == 0x3f80); /* a quarter ulp: down */
  CHECK(c, out[3] == 0x3f81); /* three quarters of an ulp: up */

  /* f16: ulp at 1 is 2^-10. */
  const float h = 1.0f / 2048.0f; /* 2^-11 */
  float hb[4] = {h, 3 * h, h / 2, 3 * h / 2};
  AmkTensorView hin[2] = {view1(a, AMK_DTYPE_F32, 4),
                          view1(hb, AMK_DTYPE_F32, 4)};
  AmkTensorView ho = view1(out, AMK_DTYPE_F16, 4);
  CHECK_RUN(c, AMK_OP_ADD, &p, hin, 2, &ho, 0);
  CHECK(c, out[0] == 0x3c00 && out[1] == 0x3c02 && out[2] == 0x3c00 &&
               out[3] == 0x3c01);
}

UNIT_MAIN("test_inst_core", test_params_from_task, test_params_errors,
          test_params_from_object, test_views, test_dispatch_errors, test_copy,
          test_half_outputs)
