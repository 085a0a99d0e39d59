/* FUSED: each recipe gives bit for bit what its steps give one by one, and
 * malformed recipes are errors. Recipes are written as JSON (cJSON) and
 * turned into AmkValue, the form a task's "recipe" param has. */
#include <cjson/cJSON.h>

#include "test_inst_util.h"

/* cJSON -> AmkValue in an arena (numbers with a fraction or exponent are
 * FLOAT, as the IR's JSON reader makes them). */
static AmkValue to_value(AmkArena *arena, const cJSON *j) {
  AmkValue v = {.kind = AMK_VALUE_NULL};
  if (cJSON_IsBool(j)) {
    v.kind = AMK_VALUE_BOOL;
    v.as.b = cJSON_IsTrue(j);
  } else if (cJSON_IsNumber(j)) {
    double d = j->valuedouble;
    v = (d == (double)(int64_t)d && fabs(d) < 1e15) ? amk_value_int((int64_t)d)
                                                    : amk_value_float(d);
  } else if (cJSON_IsString(j)) {
    v.kind = AMK_VALUE_STRING;
    v.as.s = amk_arena_strdup(arena, j->valuestring);
  } else if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
    uint32_t n = (uint32_t)cJSON_GetArraySize(j), i = 0;
    bool object = cJSON_IsObject(j);
    v.kind = object ? AMK_VALUE_OBJECT : AMK_VALUE_LIST;
    v.count = n;
    if (object)
      v.as.members = amk_arena_alloc(arena, (n ? n : 1) * sizeof(AmkMember));
    else
      v.as.items = amk_arena_alloc(arena, (n ? n : 1) * sizeof(AmkValue));
    for (const cJSON *child = j->child; child; child = child->next, i++) {
      if (object) {
        v.as.members[i].key = amk_arena_strdup(arena, child->string);
        v.as.members[i].value = to_value(arena, child);
      } else {
        v.as.items[i] = to_value(arena, child);
      }
    }
  }
  return v;
}

static AmkValue parse_recipe(AmkArena *arena, const char *json) {
  cJSON *j = cJSON_Parse(json);
  AmkValue v = j ? to_value(arena, j) : (AmkValue){.kind = AMK_VALUE_NULL};
  cJSON_Delete(j);
  return v;
}

static int run_fused(const AmkValue *recipe, AmkTensorView *in, uint32_t n_in,
                     AmkTensorView *out, const AmkInstExtra *base, char *err,
                     size_t err_len) {
  AmkInstExtra extra = base ? *base : (AmkInstExtra){0};
  extra.recipe = recipe;
  AmkInstParams none = {0};
  return amk_inst_execute(AMK_OP_FUSED, &none, in, n_in, out, 1, &extra, err,
                          err_len);
}

static const char *rmsnorm_gemv_recipe =
    "{\"steps\": ["
    " {\"op\": \"rmsnorm\", \"args\": [{\"in\": 0}, {\"in\": 1}], \"out\": 0,"
    "  \"params\": {\"eps\": 1e-5, \"hidden\": 4}, \"out_dtype\": \"%s\"},"
    " {\"op\": \"gemv_tile\", \"args\": [{\"s\": 0}, {\"in\": 2}], \"out\": \"final\","
    "  \"params\": {\"K\": 4, \"N_tile\": 2, \"n_off\": 1}}]}";

/* rmsnorm then a gemv tile, in fp32 and with a bf16 intermediate. */
static void test_rmsnorm_gemv(UnitCounts *c, AmkArena *arena, AmkDType mid) {
  char err[256];
  float x[4] = {0.3f, -1.7f, 2.2f, 0.9f}, norm_w[4] = {1.1f, 0.9f, -0.5f, 2.0f};
  float w[12] = {0.1f, 0.2f, 0.3f, 0.4f, -1.3f, 0.7f, 0.05f, 2.5f,
                 0.33f, -0.25f, 1.75f, -0.6f};
  uint16_t mid_buf[4];
  float mid_f32[4];
  void *tmp = mid == AMK_DTYPE_F32 ? (void *)mid_f32 : (void *)mid_buf;
  float unfused[3] = {0}, fused[3] = {0};

  AmkInstParams norm = {0}, gemv = {0};
  set_float(&norm, "eps", 1e-5);
  set_int(&norm, "hidden", 4);
  set_int(&gemv, "K", 4);
  set_int(&gemv, "N_tile", 2);
  set_int(&gemv, "n_off", 1);
  AmkTensorView norm_in[2] = {view2(x, AMK_DTYPE_F32, 1, 4),
                              view1(norm_w, AMK_DTYPE_F32, 4)};
  AmkTensorView tmp_v = view2(tmp, mid, 1, 4);
  AmkTensorView gemv_in[2] = {tmp_v, view2(w, AMK_DTYPE_F32, 3, 4)};
  AmkTensorView uo = view2(unfused, AMK_DTYPE_F32, 1, 3);
  CHECK_RUN(c, AMK_OP_RMSNORM, &norm, norm_in, 2, &tmp_v, 0);
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &gemv, gemv_in, 2, &uo, 0);

  char json[1024];
  snprintf(json, sizeof json, rmsnorm_gemv_recipe,
           mid == AMK_DTYPE_F32 ? "f32" : "bfloat16");
  AmkValue recipe = parse_recipe(arena, json);
  AmkTensorView in[3] = {norm_in[0], norm_in[1], gemv_in[1]};
  AmkTensorView fo = view2(fused, AMK_DTYPE_F32, 1, 3);
  CHECK(c, run_fused(&recipe, in, 3, &fo, NULL, err, sizeof err) == 0);
  CHECK(c, unfused[1] != 0.0f && unfused[2] != 0.0f && unfused[0] == 0.0f);
  CHECK(c, same_bits(fused, unfused, sizeof fused));
}

/* Two gemv tiles + one residual add, against two fused tiles each adding
 * the residual to its own columns. */
static void test_gemv_add(UnitCounts *c, AmkArena *arena) {
  char err[256];
  float x[3] = {0.7f, -1.1f, 0.45f}, w[6] = {1.5f, -0.3f, 0.8f, 0.2f, 0.9f, -2.1f};
  float residual[2] = {0.125f, -3.3f};
  float h[2] = {0}, unfused[2] = {0}, fused[2] = {0};
  AmkTensorView gin[2] = {view2(x, AMK_DTYPE_F32, 1, 3), view2(w, AMK_DTYPE_F32, 2, 3)};
  AmkTensorView hv = view2(h, AMK_DTYPE_F32, 1, 2);
  AmkTensorView res = view2(residual, AMK_DTYPE_F32, 1, 2);
  for (int tile = 0; tile < 2; tile++) {
    AmkInstParams gemv = {0};
    set_int(&gemv, "K", 3);
    set_int(&gemv, "N_tile", 1);
    set_int(&gemv, "n_off", tile);
    CHECK_RUN(c, AMK_OP_GEMV_TILE, &gemv, gin, 2, &hv, 0);
  }
  AmkInstParams none = {0};
  AmkTensorView add_in[2] = {hv, res};
  AmkTensorView uo = view2(unfused, AMK_DTYPE_F32, 1, 2);
  CHECK_RUN(c, AMK_OP_ADD, &none, add_in, 2, &uo, 0);

  AmkTensorView in[3] = {gin[0], gin[1], res};
  AmkTensorView fo = view2(fused, AMK_DTYPE_F32, 1, 2);
  for (int tile = 0; tile < 2; tile++) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"steps\": ["
             " {\"op\": \"gemv_tile\", \"args\": [{\"in\": 0}, {\"in\": 1}],"
             "  \"out\": 0, \"out_shape\": [1, 2], \"out_dtype\": \"f32\","
             "  \"params\": {\"K\": 3, \"N_tile\": 1, \"n_off\": %d}},"
             " {\"op\": \"ADD\", \"args\": [{\"s\": 0}, {\"in\": 2}], \"out\": \"final\","
             "  \"params\": {\"N_tile\": 1, \"n_off\": %d}}]}",
             tile, tile);
    AmkValue recipe = parse_recipe(arena, json);
    CHECK(c, run_fused(&recipe, in, 3, &fo, NULL, err, sizeof err) == 0);
    /* The tile writes only its own column. */
    CHECK(c, tile == 1 || fused[1] == 0.0f);
  }
  CHECK(c, same_bits(fused, unfused, sizeof fused));
}

static void test_silu_mul_gemv(UnitCounts *c, AmkArena *arena) {
  char err[256];
  float gate[4] = {0.5f, -1.25f, 2.0f, 0.1f}, up[4] = {1.3f, 0.7f, -0.2f, 3.0f};
  float w[8] = {0.3f, -0.6f, 1.2f, 0.05f, -0.9f, 0.4f, 0.25f, 1.1f};
  float act[4], unfused[2], fused[2];
  AmkInstParams none = {0}, gemv = {0};
  set_int(&gemv, "K", 4);
  set_int(&gemv, "N_tile", 2);
  set_int(&gemv, "n_off", 0);
  AmkTensorView sin[2] = {view2(gate, AMK_DTYPE_F32, 1, 4), view2(up, AMK_DTYPE_F32, 1, 4)};
  AmkTensorView av = view2(act, AMK_DTYPE_F32, 1, 4);
  AmkTensorView gin[2] = {av, view2(w, AMK_DTYPE_F32, 2, 4)};
  AmkTensorView uo = view2(unfused, AMK_DTYPE_F32, 1, 2);
  CHECK_RUN(c, AMK_OP_SILU_MUL, &none, sin, 2, &av, 0);
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &gemv, gin, 2, &uo, 0);

  /* The reference's form: ops as integer codes (9 silu_mul, 5 gemv_tile). */
  AmkValue recipe = parse_recipe(
      arena, "{\"steps\": ["
             " {\"op\": 9, \"args\": [{\"in\": 0}, {\"in\": 1}], \"out\": 0},"
             " {\"op\": 5, \"args\": [{\"s\": 0}, {\"in\": 2}], \"out\": -1,"
             "  \"params\": {\"K\": 4, \"N_tile\": 2, \"n_off\": 0}}]}");
  AmkTensorView in[3] = {sin[0], sin[1], gin[1]};
  AmkTensorView fo = view2(fused, AMK_DTYPE_F32, 1, 2);
  CHECK(c, run_fused(&recipe, in, 3, &fo, NULL, err, sizeof err) == 0);
  CHECK(c, same_bits(fused, unfused, sizeof fused));
}

/* rope of a k vector, appended to the cache; the step position reaches the
 * kv_append step through the fused task's extra. */
static void test_rope_kv_append(UnitCounts *c, AmkArena *arena) {
  char err[256];
  float k[4] = {0.9f, -0.4f, 1.6f, 0.2f}, roped[4];
  int32_t pos[1] = {2};
  float cache_a[12] = {0}, cache_b[12] = {0};
  AmkInstParams rope = {0}, append = {0};
  set_int(&rope, "head_dim", 2);
  set_float(&rope, "theta", 10000.0);
  set_int(&append, "pos", 0); /* overridden by the step's position */
  AmkInstExtra step = {.has_position = true, .position = 2};
  AmkTensorView rin[2] = {view2(k, AMK_DTYPE_F32, 1, 4), view1(pos, AMK_DTYPE_I32, 1)};
  AmkTensorView rv = view2(roped, AMK_DTYPE_F32, 1, 4);
  AmkTensorView ca = view3(cache_a, AMK_DTYPE_F32, 3, 2, 2);
  AmkTensorView ain[2] = {rv, ca};
  CHECK_RUN(c, AMK_OP_ROPE, &rope, rin, 2, &rv, 0);
  CHECK(c, amk_inst_execute(AMK_OP_KV_APPEND, &append, ain, 2, &ca, 1, &step,
                            err, sizeof err) == 0);

  AmkValue recipe = parse_recipe(
      arena, "{\"steps\": ["
             " {\"op\": \"rope\", \"args\": [{\"in\": 0}, {\"in\": 1}], \"out\": 3,"
             "  \"params\": {\"head_dim\": 2, \"theta\": 10000.0}},"
             " {\"op\": \"kv_append\", \"args\": [{\"s\": 3}, {\"in\": 2}],"
             "  \"out\": \"final\", \"params\": {\"pos\": 0}}]}");
  AmkTensorView cb = view3(cache_b, AMK_DTYPE_F32, 3, 2, 2);
  AmkTensorView in[3] = {rin[0], rin[1], cb};
  CHECK(c, run_fused(&recipe, in, 3, &cb, &step, err, sizeof err) == 0);
  CHECK(c, cache_b[8] != 0.0f && cache_b[0] == 0.0f); /* row 2 written */
  CHECK(c, same_bits(cache_a, cache_b, sizeof cache_a));
}

static void test_recipe_errors(UnitCounts *c, AmkArena *arena) {
  char err[256];
  float x[2] = {1, 2}, out[2];
  AmkTensorView in[1] = {view1(x, AMK_DTYPE_F32, 2)};
  AmkTensorView o = view1(out, AMK_DTYPE_F32, 2);
  static const struct {
    const char *json, *message;
  } bad[] = {
      {"{}", "expected {\"steps\": [...]}"},
      {"{\"steps\": []}", "expected {\"steps\": [...]}"},
      {"{\"steps\": [{\"op\": \"fused\", \"out\": \"final\"}]}", "nested fused"},
      {"{\"steps\": [{\"op\": \"frobnicate\", \"out\": \"final\"}]}",
       "unknown or missing op"},
      {"{\"steps\": [{\"op\": \"nop\", \"out\": \"final\"}]}", "writes no output"},
      {"{\"steps\": [{\"op\": \"gelu\", \"args\": [{\"in\": 1}], \"out\": \"final\"}]}",
       "input 1 is outside [0, 1)"},
      {"{\"steps\": [{\"op\": \"gelu\", \"args\": [{\"s\": 0}], \"out\": \"final\"}]}",
       "reads scratch 0 before a step writes it"},
      {"{\"steps\": [{\"op\": \"gelu\", \"args\": [{\"in\": 0}], \"out\": 0}]}",
       "no step writes \"final\""},
      {"{\"steps\": [{\"op\": \"gelu\", \"args\": [{\"in\": 0}], \"out\": 99}]}",
       "out must be \"final\" or a scratch slot"},
      {"{\"steps\": [{\"op\": \"gelu\", \"args\": [{\"x\": 0}], \"out\": \"final\"}]}",
       "arg 0 must be"},
      {"{\"steps\": [{\"op\": \"gelu\", \"args\": [{\"in\": 0}], \"out\": 0,"
       " \"out_dtype\": \"float64\"}, {\"op\": \"copy\", \"args\": [{\"s\": 0}],"
       " \"out\": \"final\"}]}",
       "unknown out_dtype"},
      {"{\"steps\": [{\"op\": \"gelu\", \"args\": [{\"in\": 0}], \"out\": \"final\","
       " \"params\": {\"K\": 1.5}}]}",
       "step 0: param 'K' must be an integer"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    AmkValue recipe = parse_recipe(arena, bad[i].json);
    int rc = run_fused(&recipe, in, 1, &o, NULL, err, sizeof err);
    CHECK(c, rc == AMK_INST_ERR_RECIPE);
    if (!strstr(err, bad[i].message))
      fprintf(stderr, "recipe %zu: got \"%s\"\n", i, err);
    CHECK(c, strstr(err, bad[i].message) != NULL);
    CHECK(c, amk_inst_recipe_check(&recipe, 1, NULL, 0) == AMK_INST_ERR_RECIPE);
  }

  /* A failing step reports its index and the op's own message. */
  AmkValue shape_error = parse_recipe(
      arena, "{\"steps\": [{\"op\": \"gemv_tile\", \"args\": [{\"in\": 0}, {\"in\": 0}],"
             " \"out\": \"final\", \"params\": {\"K\": 3, \"N_tile\": 1, \"n_off\": 0}}]}");
  CHECK(c, run_fused(&shape_error, in, 1, &o, NULL, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  CHECK_STR(c, err, "fused: step 0: gemv_tile: K = 3 does not divide the input's 2 elements");

  /* No recipe at all. */
  AmkInstParams none = {0};
  CHECK(c, amk_inst_execute(AMK_OP_FUSED, &none, in, 1, &o, 1, NULL, err,
                            sizeof err) == AMK_INST_ERR_RECIPE);

  /* A step may overwrite the slot it reads: (x * 2) * 3 through slot 0. */
  AmkValue twice = parse_recipe(
      arena, "{\"steps\": ["
             " {\"op\": \"mul\", \"args\": [{\"in\": 0}], \"out\": 0, \"params\": {\"scale\": 2.0}},"
             " {\"op\": \"mul\", \"args\": [{\"s\": 0}], \"out\": 0, \"params\": {\"scale\": 3.0}},"
             " {\"op\": \"copy\", \"args\": [{\"s\": 0}], \"out\": \"final\"}]}");
  CHECK(c, amk_inst_recipe_check(&twice, 1, err, sizeof err) == 0);
  CHECK(c, run_fused(&twice, in, 1, &o, NULL, err, sizeof err) == 0);
  CHECK(c, out[0] == 6.0f && out[1] == 12.0f);
}

int main(void) {
  UnitCounts c = {0};
  AmkArena arena = {0};
  test_rmsnorm_gemv(&c, &arena, AMK_DTYPE_F32);
  test_rmsnorm_gemv(&c, &arena, AMK_DTYPE_BF16);
  test_gemv_add(&c, &arena);
  test_silu_mul_gemv(&c, &arena);
  test_rope_kv_append(&c, &arena);
  test_recipe_errors(&c, &arena);
  amk_arena_free(&arena);
  return unit_finish("test_inst_fused", &c);
}
