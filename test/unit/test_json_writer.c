/* The JSON writer and reader against hand-written expectations.
 *
 * Every expected string below was written by hand from Python's
 * json.dumps(..., indent=2) rules (and checked with python3 once); none is
 * produced by the code under test. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amk/io.h"
#include "unit.h"

static char *string_json(const char *s) {
  AmkStrBuf sb;
  amk_sb_init(&sb);
  amk_write_json_string(s, &sb);
  return sb.data;
}

static char *value_json(const AmkValue *v, int depth) {
  AmkStrBuf sb;
  amk_sb_init(&sb);
  amk_write_json_value(v, depth, &sb);
  return sb.data;
}

static void expect_string(UnitCounts *c, const char *input, const char *want) {
  char *got = string_json(input);
  CHECK_STR(c, got, want);
  free(got);
}

static void expect_value(UnitCounts *c, const AmkValue *v, int depth, const char *want) {
  char *got = value_json(v, depth);
  CHECK_STR(c, got, want);
  free(got);
}

static void test_strings(UnitCounts *c) {
  expect_string(c, "", "\"\"");
  expect_string(c, "plain text", "\"plain text\"");
  expect_string(c, "a\"b\\c", "\"a\\\"b\\\\c\"");
  expect_string(c, "\n\r\t\b\f", "\"\\n\\r\\t\\b\\f\"");
  expect_string(c, "\x01\x1f\x7f", "\"\\u0001\\u001f\\u007f\"");
  expect_string(c, "/", "\"/\""); /* json.dumps does not escape '/' */
  expect_string(c, "caf\xc3\xa9", "\"caf\\u00e9\"");
  expect_string(c, "\xe2\x82\xac", "\"\\u20ac\"");            /* U+20AC */
  expect_string(c, "\xef\xbf\xbf", "\"\\uffff\"");            /* U+FFFF */
  expect_string(c, "\xf0\x9f\x98\x80", "\"\\ud83d\\ude00\""); /* U+1F600 */
  expect_string(c, "\xf4\x8f\xbf\xbf", "\"\\udbff\\udfff\""); /* U+10FFFF */
  /* Malformed UTF-8 cannot come from the reader; it is written as U+FFFD. */
  expect_string(c, "x\xffy", "\"x\\ufffdy\"");
}

static void test_values(UnitCounts *c, AmkArena *arena) {
  AmkValue v = {.kind = AMK_VALUE_NULL};
  expect_value(c, &v, 0, "null");
  v.kind = AMK_VALUE_BOOL;
  v.as.b = true;
  expect_value(c, &v, 0, "true");
  v.as.b = false;
  expect_value(c, &v, 0, "false");
  v = amk_value_int(-9223372036854775807LL - 1);
  expect_value(c, &v, 0, "-9223372036854775808");
  v = amk_value_int(0);
  expect_value(c, &v, 0, "0");
  v = amk_value_float(64.0);
  expect_value(c, &v, 0, "64.0");
  v = amk_value_float(1e-06);
  expect_value(c, &v, 0, "1e-06");
  v = amk_value_float(-0.0);
  expect_value(c, &v, 0, "-0.0");
  v = amk_value_float(NAN);
  expect_value(c, &v, 0, "NaN");
  v = amk_value_float(INFINITY);
  expect_value(c, &v, 0, "Infinity");
  v = amk_value_float(-INFINITY);
  expect_value(c, &v, 0, "-Infinity");

  AmkValue empty_list = {.kind = AMK_VALUE_LIST};
  AmkValue empty_object = {.kind = AMK_VALUE_OBJECT};
  expect_value(c, &empty_list, 3, "[]");
  expect_value(c, &empty_object, 3, "{}");

  /* {"a": [1, 2.5, {}], "b": {"c": []}, "d": "x"} */
  AmkValue *items = amk_arena_alloc(arena, 3 * sizeof *items);
  items[0] = amk_value_int(1);
  items[1] = amk_value_float(2.5);
  items[2] = empty_object;
  AmkMember *inner = amk_arena_alloc(arena, sizeof *inner);
  inner[0].key = "c";
  inner[0].value = empty_list;
  AmkMember *members = amk_arena_alloc(arena, 3 * sizeof *members);
  members[0].key = "a";
  members[0].value = (AmkValue){.kind = AMK_VALUE_LIST, .count = 3, .as.items = items};
  members[1].key = "b";
  members[1].value = (AmkValue){.kind = AMK_VALUE_OBJECT, .count = 1, .as.members = inner};
  members[2].key = "d";
  members[2].value = (AmkValue){.kind = AMK_VALUE_STRING, .as.s = "x"};
  AmkValue object = {.kind = AMK_VALUE_OBJECT, .count = 3, .as.members = members};
  expect_value(c, &object, 0,
               "{\n"
               "  \"a\": [\n"
               "    1,\n"
               "    2.5,\n"
               "    {}\n"
               "  ],\n"
               "  \"b\": {\n"
               "    \"c\": []\n"
               "  },\n"
               "  \"d\": \"x\"\n"
               "}");
  /* At depth 1 the closing brace is indented once and members twice. */
  expect_value(c, &members[1].value, 1, "{\n    \"c\": []\n  }");

  /* Helpers. */
  int64_t i64 = 0;
  double real = 0;
  CHECK(c, amk_value_as_int(&items[0], &i64) && i64 == 1);
  CHECK(c, !amk_value_as_int(&items[1], &i64));
  CHECK(c, amk_value_as_real(&items[1], &real) && real == 2.5);
  CHECK(c, amk_value_as_real(&items[0], &real) && real == 1.0);
  AmkValue t = {.kind = AMK_VALUE_BOOL, .as.b = true};
  CHECK(c, !amk_value_as_int(&t, &i64) && !amk_value_as_real(&t, &real));
  CHECK(c, amk_object_get(&object, "d") == &members[2].value);
  CHECK(c, amk_object_get(&object, "zz") == NULL);
  CHECK(c, amk_object_get(&items[0], "a") == NULL);

  AmkValue copy = amk_value_clone(arena, &object);
  CHECK(c, amk_value_equal(&copy, &object));
  CHECK(c, copy.as.members != object.as.members);
  CHECK(c, copy.as.members[2].value.as.s != members[2].value.as.s);
  copy.as.members[0].value.as.items[1] = amk_value_int(2);
  CHECK(c, !amk_value_equal(&copy, &object));
  AmkValue one = amk_value_int(1), one_f = amk_value_float(1.0);
  CHECK(c, !amk_value_equal(&one, &one_f)); /* they are written differently */
  AmkValue nan1 = amk_value_float(NAN), zero = amk_value_float(0.0),
           neg_zero = amk_value_float(-0.0);
  CHECK(c, amk_value_equal(&nan1, &nan1));
  CHECK(c, !amk_value_equal(&zero, &neg_zero));
}

/* A whole module built in memory, written out. */
static void test_module(UnitCounts *c) {
  AmkModule *m = amk_module_new();
  AmkArena *arena = &m->arena;

  AmkBuffer *b = amk_module_add_buffer(m);
  b->name = "x";
  b->kind = AMK_KIND_IO_INPUT;
  b->dtype = AMK_DTYPE_I32;
  b->rank = 1;
  b->shape = amk_arena_alloc(arena, sizeof(AmkValue));
  b->shape[0] = amk_value_int(1);
  b->space = AMK_SPACE_HBM;
  b = amk_module_add_buffer(m);
  b->name = "w";
  b->kind = AMK_KIND_WEIGHT;
  b->dtype = AMK_DTYPE_BF16;
  b->rank = 0;
  b->space = AMK_SPACE_SMEM;
  b->source = "model.w";

  AmkCounter *k = amk_module_add_counter(m);
  k->note = "emb\xc3\xa9";

  AmkTask *t = amk_module_add_task(m);
  t->op = AMK_OP_GEMV_TILE;
  t->n_inputs = 2;
  t->inputs = amk_arena_alloc(arena, 2 * sizeof(int32_t));
  t->inputs[0] = 0;
  t->inputs[1] = 1;
  t->n_outputs = 0;
  t->out_counter = 0;
  t->n_waits = 1;
  t->waits = amk_arena_alloc(arena, sizeof(AmkWait));
  t->waits[0].counter = 0;
  t->waits[0].threshold = amk_value_float(1.0);
  t->n_params = 2;
  t->params = amk_arena_alloc(arena, 2 * sizeof(AmkParam));
  t->params[0].key = "K";
  t->params[0].value = amk_value_int(64);
  t->params[1].key = "eps";
  t->params[1].value = amk_value_float(1e-05);
  t->has_sm = true;
  t->sm = 3;
  t->est_bytes = 4096;
  t->label = "L0.q[0]";

  m->pages = amk_arena_alloc(arena, sizeof *m->pages);
  m->pages->n_bindings = 1;
  m->pages->bindings = amk_arena_alloc(arena, sizeof(AmkPageBinding));
  m->pages->bindings[0].buffer = 1;
  m->pages->bindings[0].page = 0;
  m->pages->n_pages = 1;
  m->pages->pages = amk_arena_alloc(arena, sizeof(AmkPage));
  m->pages->pages[0] = (AmkPage){.id = 0, .space = AMK_SPACE_SMEM, .nbytes = 128,
                                 .live_start = -1, .live_end = 4};

  m->config = amk_arena_alloc(arena, sizeof *m->config);
  m->config->tiling.kind = AMK_VALUE_OBJECT;
  m->config->fusion_grouping.kind = AMK_VALUE_LIST;
  m->config->sm_assignment = AMK_SM_EXPLICIT;
  m->config->n_sm_map = 1;
  m->config->sm_map = amk_arena_alloc(arena, sizeof(AmkSmMapEntry));
  m->config->sm_map[0] = (AmkSmMapEntry){.task = 0, .sm = 3};
  m->config->pipelining_depth = 2;
  m->config->page_allocation = AMK_PAGES_LINEAR;
  m->config->threads_per_block = 256;

  AmkStrBuf sb;
  amk_sb_init(&sb);
  amk_write_json(m, &sb);
  CHECK_STR(c, sb.data,
            "{\n"
            "  \"ir_version\": \"0.2.0\",\n"
            "  \"abi_version\": \"0.2\",\n"
            "  \"meta\": {},\n"
            "  \"target\": null,\n"
            "  \"buffers\": [\n"
            "    {\n"
            "      \"id\": 0,\n"
            "      \"name\": \"x\",\n"
            "      \"kind\": \"IO_INPUT\",\n"
            "      \"dtype\": \"I32\",\n"
            "      \"shape\": [\n"
            "        1\n"
            "      ],\n"
            "      \"space\": \"HBM\",\n"
            "      \"source\": null\n"
            "    },\n"
            "    {\n"
            "      \"id\": 1,\n"
            "      \"name\": \"w\",\n"
            "      \"kind\": \"WEIGHT\",\n"
            "      \"dtype\": \"BF16\",\n"
            "      \"shape\": [],\n"
            "      \"space\": \"SMEM\",\n"
            "      \"source\": \"model.w\"\n"
            "    }\n"
            "  ],\n"
            "  \"counters\": [\n"
            "    {\n"
            "      \"id\": 0,\n"
            "      \"init\": 0,\n"
            "      \"note\": \"emb\\u00e9\"\n"
            "    }\n"
            "  ],\n"
            "  \"tasks\": [\n"
            "    {\n"
            "      \"id\": 0,\n"
            "      \"op\": \"GEMV_TILE\",\n"
            "      \"inputs\": [\n"
            "        0,\n"
            "        1\n"
            "      ],\n"
            "      \"outputs\": [],\n"
            "      \"out_counter\": 0,\n"
            "      \"waits\": [\n"
            "        {\n"
            "          \"counter\": 0,\n"
            "          \"threshold\": 1.0\n"
            "        }\n"
            "      ],\n"
            "      \"params\": {\n"
            "        \"K\": 64,\n"
            "        \"eps\": 1e-05\n"
            "      },\n"
            "      \"sm\": 3,\n"
            "      \"est_bytes\": 4096,\n"
            "      \"est_flops\": 0,\n"
            "      \"label\": \"L0.q[0]\"\n"
            "    }\n"
            "  ],\n"
            "  \"pages\": {\n"
            "    \"buffer_to_page\": {\n"
            "      \"1\": 0\n"
            "    },\n"
            "    \"pages\": [\n"
            "      {\n"
            "        \"id\": 0,\n"
            "        \"space\": \"SMEM\",\n"
            "        \"nbytes\": 128,\n"
            "        \"live_start\": -1,\n"
            "        \"live_end\": 4\n"
            "      }\n"
            "    ]\n"
            "  },\n"
            "  \"config\": {\n"
            "    \"tiling\": {},\n"
            "    \"fusion_grouping\": [],\n"
            "    \"sm_assignment\": {\n"
            "      \"0\": 3\n"
            "    },\n"
            "    \"pipelining_depth\": 2,\n"
            "    \"page_allocation\": \"linear\",\n"
            "    \"threads_per_block\": 256,\n"
            "    \"smem_bytes_per_block\": 0\n"
            "  }\n"
            "}");

  /* A built-in target is written with every field, in table order. */
  sb.len = 0;
  m->pages = NULL;
  m->config = NULL;
  m->n_tasks = m->n_counters = m->n_buffers = 0;
  m->target = (AmkTarget *)amk_builtin_target("h100");
  CHECK(c, m->target != NULL);
  if (m->target) {
    amk_write_json(m, &sb);
    CHECK_STR(c, sb.data,
              "{\n"
              "  \"ir_version\": \"0.2.0\",\n"
              "  \"abi_version\": \"0.2\",\n"
              "  \"meta\": {},\n"
              "  \"target\": {\n"
              "    \"name\": \"h100\",\n"
              "    \"sm_arch\": 90,\n"
              "    \"num_sms\": 132,\n"
              "    \"smem_bytes_per_sm\": 233472,\n"
              "    \"smem_bytes_per_block_optin\": 232448,\n"
              "    \"regs_per_sm\": 65536,\n"
              "    \"max_threads_per_sm\": 2048,\n"
              "    \"max_regs_per_thread\": 255,\n"
              "    \"l2_bytes\": 52428800,\n"
              "    \"hbm_bytes\": 85899345920,\n"
              "    \"hbm_bandwidth_gbs\": 3350.0,\n"
              "    \"fp16_tflops\": 989.0,\n"
              "    \"clock_ghz\": 1.98,\n"
              "    \"supports_cooperative\": true,\n"
              "    \"wddm_tdr\": false,\n"
              "    \"measured_bw_gbs\": 3089.0,\n"
              "    \"note\": \"Hopper SXM5, HBM3\"\n"
              "  },\n"
              "  \"buffers\": [],\n"
              "  \"counters\": [],\n"
              "  \"tasks\": [],\n"
              "  \"pages\": null,\n"
              "  \"config\": null\n"
              "}");
  }
  m->target = NULL;
  amk_sb_free(&sb);
  amk_module_free(m);
}

/* ---- the reader -------------------------------------------------------------- */

static AmkModule *read_quietly(AmkDiagEngine *d, const char *text) {
  amk_diag_clear_captured(d);
  return amk_read_json("t.json", text, strlen(text), d);
}

/* Reading `text` fails with one error whose message and position are given. */
static void expect_error(UnitCounts *c, AmkDiagEngine *d, const char *text,
                         unsigned line, unsigned col, const char *message) {
  AmkModule *m = read_quietly(d, text);
  CHECK(c, m == NULL);
  amk_module_free(m);
  CHECK(c, amk_diag_captured_count(d) == 1);
  const AmkDiagnostic *e = amk_diag_captured(d, 0);
  if (!e)
    return;
  CHECK_STR(c, e->message, message);
  CHECK(c, e->severity == AMK_SEVERITY_ERROR);
  if (e->loc.line != line || e->loc.col != col)
    fprintf(stderr, "  (for \"%s\": at %u:%u, want %u:%u)\n", message, e->loc.line,
            e->loc.col, line, col);
  CHECK(c, e->loc.line == line && e->loc.col == col);
}

static void test_reader(UnitCounts *c) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);

  /* Lexemes decide INT vs FLOAT; duplicates keep the first position and the
   * last value; missing optional keys take the reference's defaults. */
  const char *text =
      "{\"meta\": {\"a\": 1, \"b\": 2, \"a\": 3.0},\n"
      " \"target\": {}, \"pages\": 0, \"config\": {\"sm_assignment\": {\"02\": 5, \"2\": 7}},\n"
      " \"buffers\": [{\"id\": 0, \"name\": \"x\", \"kind\": \"ACTIVATION\",\n"
      "   \"dtype\": \"F16\", \"shape\": [64.0, 2, \"z\"]}],\n"
      " \"counters\": [{\"id\": 0, \"note\": \"L0.q\"}, {\"id\": 1, \"note\": \"dup\"},\n"
      "   {\"id\": 2, \"note\": \"dup\"}, {\"id\": 3, \"note\": \"has space\", \"x\": 1}],\n"
      " \"tasks\": [{\"id\": 0, \"op\": \"NOP\", \"inputs\": [], \"outputs\": [],\n"
      "   \"out_counter\": 0, \"waits\": [{\"counter\": 1, \"threshold\": 1.0}],\n"
      "   \"params\": {\"K\": 64, \"eps\": 1e-5, \"big\": -9223372036854775808,\n"
      "              \"K\": 1E2}, \"unknown\": [1]}]}";
  AmkModule *m = read_quietly(d, text);
  CHECK(c, m != NULL);
  CHECK(c, amk_diag_captured_count(d) == 0);
  if (m) {
    CHECK_STR(c, m->ir_version, "0.2.0");
    CHECK_STR(c, m->abi_version, "0.2");
    CHECK(c, m->meta.kind == AMK_VALUE_OBJECT && m->meta.count == 2);
    CHECK_STR(c, m->meta.as.members[0].key, "a");
    CHECK(c, m->meta.as.members[0].value.kind == AMK_VALUE_FLOAT);
    CHECK(c, m->meta.as.members[0].value.as.f == 3.0);
    CHECK(c, m->target == NULL && m->pages == NULL && m->config != NULL);
    if (m->config) {
      CHECK(c, m->config->sm_assignment == AMK_SM_EXPLICIT);
      CHECK(c, m->config->n_sm_map == 1); /* "02" and "2" are both int 2 */
      CHECK(c, m->config->sm_map[0].task == 2 && m->config->sm_map[0].sm == 7);
      CHECK(c, m->config->pipelining_depth == 2);
      CHECK(c, m->config->page_allocation == AMK_PAGES_GRAPH_COLOR);
      CHECK(c, m->config->threads_per_block == 256);
    }
    CHECK(c, m->n_buffers == 1);
    if (m->n_buffers == 1) {
      const AmkBuffer *b = &m->buffers[0];
      CHECK(c, b->kind == AMK_KIND_ACTIVATION && b->dtype == AMK_DTYPE_F16);
      CHECK(c, b->space == AMK_SPACE_HBM && b->source == NULL);
      CHECK(c, b->rank == 3);
      CHECK(c, b->shape[0].kind == AMK_VALUE_FLOAT && b->shape[1].kind == AMK_VALUE_INT);
      CHECK(c, b->shape[2].kind == AMK_VALUE_STRING);
      CHECK(c, b->loc.line == 3 && b->loc.col == 14);
    }
    CHECK(c, m->n_counters == 4);
    if (m->n_counters == 4) {
      CHECK_STR(c, m->counters[0].name, "L0.q");
      CHECK(c, m->counters[1].name == NULL && m->counters[2].name == NULL);
      CHECK(c, m->counters[3].name == NULL);
      CHECK(c, m->counters[0].init == 0);
    }
    CHECK(c, m->n_tasks == 1);
    if (m->n_tasks == 1) {
      const AmkTask *t = &m->tasks[0];
      CHECK(c, t->op == AMK_OP_NOP && t->n_inputs == 0 && t->n_waits == 1);
      CHECK(c, t->waits[0].threshold.kind == AMK_VALUE_FLOAT);
      CHECK(c, !t->has_sm && t->est_bytes == 0 && strcmp(t->label, "") == 0);
      CHECK(c, t->n_params == 3);
      CHECK_STR(c, t->params[0].key, "K");
      CHECK(c, t->params[0].value.kind == AMK_VALUE_FLOAT && t->params[0].value.as.f == 100.0);
      CHECK(c, t->params[1].value.kind == AMK_VALUE_FLOAT && t->params[1].value.as.f == 1e-5);
      CHECK(c, t->params[2].value.kind == AMK_VALUE_INT &&
                   t->params[2].value.as.i == INT64_MIN);
      CHECK(c, t->loc.line == 7 && t->loc.col == 12);
    }
    amk_module_free(m);
  }

  /* NaN and Infinity are Python json literals; long floats exceed cJSON's
   * number buffer but still load. */
  m = read_quietly(d, "{\"meta\": {\"n\": NaN, \"i\": -Infinity, \"x\": "
                      "0.100000000000000000000000000000000000000000000000000000000000000001}}");
  CHECK(c, m != NULL);
  if (m) {
    CHECK(c, m->meta.count == 3);
    CHECK(c, isnan(m->meta.as.members[0].value.as.f));
    CHECK(c, isinf(m->meta.as.members[1].value.as.f) && m->meta.as.members[1].value.as.f < 0);
    CHECK(c, m->meta.as.members[2].value.as.f == 0.1);
    amk_module_free(m);
  }

  /* Versions: minor differences load, numbers are str()'d as Python does. */
  m = read_quietly(d, "{\"ir_version\": \"0.9.1\", \"abi_version\": 0}");
  CHECK(c, m != NULL);
  if (m) {
    CHECK_STR(c, m->ir_version, "0.9.1");
    CHECK_STR(c, m->abi_version, "0");
    amk_module_free(m);
  }

  /* Errors: message (with the JSON path first) and line:col. */
  expect_error(c, d, "{\"ir_version\": \"1.0.0\"}", 1, 16,
               "IR major version mismatch: file 1.0.0 vs runtime 0.2.0");
  expect_error(c, d, "{\"abi_version\": null}", 1, 17,
               "ABI major version mismatch: file None vs runtime 0.2");
  expect_error(c, d, "{\"tasks\": [{\"id\": 0, \"op\": 2}]}", 1, 28,
               "tasks[0].op: expected an op name (a string), got an integer");
  expect_error(c, d, "{\"tasks\": [{\"id\": 0, \"op\": \"FOO\"}]}", 1, 28,
               "tasks[0].op: unknown op 'FOO'");
  expect_error(c, d, "{\"tasks\": [\n  {\"id\": 0, \"op\": \"NOP\"}]}", 2, 3,
               "tasks[0]: missing required key 'inputs'");
  expect_error(c, d,
               "{\"tasks\": [{\"id\": 0, \"op\": \"NOP\", \"inputs\": [], \"outputs\": [],\n"
               "  \"out_counter\": 0, \"waits\": [{\"counter\": \"c\", \"threshold\": 1}]}]}",
               2, 43, "tasks[0].waits[0].counter: expected an integer, got a string");
  expect_error(c, d,
               "{\"tasks\": [{\"id\": 0, \"op\": \"NOP\", \"inputs\": 3, \"outputs\": []}]}",
               1, 45, "tasks[0].inputs: expected a list, got an integer");
  expect_error(c, d, "{\"tasks\": [{\"id\": 4294967296}]}", 1, 19,
               "tasks[0].id: integer 4294967296 is out of the 32-bit range");
  expect_error(c, d, "{\"counters\": [{\"init\": 99999999999999999999, \"id\": 0}]}", 1, 24,
               "counters[0].init: integer is out of the 64-bit range");
  expect_error(c, d, "{\"buffers\": [{\"id\": 1.0}]}", 1, 21,
               "buffers[0].id: expected an integer, got a float");
  expect_error(c, d, "{\"pages\": {\"buffer_to_page\": {\"x\": 1}, \"pages\": []}}", 1, 36,
               "pages.buffer_to_page: key 'x' is not a 32-bit integer");
  expect_error(c, d, "{\"config\": {\"page_allocation\": \"best\"}}", 1, 32,
               "config.page_allocation: unknown policy 'best' (expected \"linear\", "
               "\"graph_color\" or \"none\")");
  expect_error(c, d, "{\"target\": {\"name\": \"x\"}}", 1, 12,
               "target: missing required key 'sm_arch'");
  expect_error(c, d, "{\"meta\": []}", 1, 10, "meta: expected an object, got a list");
  expect_error(c, d, "[1, 2]", 1, 1,
               "expected a JSON object at the top level, got a list");
  /* Malformed JSON. */
  expect_error(c, d, "", 1, 1, "malformed JSON: the file is empty");
  expect_error(c, d, "{\"a\": 1,\n \"b\" 2}", 2, 6, "malformed JSON: unexpected token");
  expect_error(c, d, "{\"a\": [1, 2", 1, 12, "malformed JSON: unexpected end of file");
  expect_error(c, d, "{\"a\": 01}", 1, 7, "malformed JSON: invalid number '01'");
  expect_error(c, d, "{\"a\": 1.}", 1, 7, "malformed JSON: invalid number '1.'");
  expect_error(c, d, "{\"a\": tru}", 1, 7, "malformed JSON: unexpected character 't'");
  expect_error(c, d, "{\"a\": \"x\ty\"}", 1, 9,
               "malformed JSON: invalid control character in string");
  expect_error(c, d, "{\"a\": \"\\q\"}", 1, 8, "malformed JSON: invalid escape '\\q' in string");
  expect_error(c, d, "{\"a\": \"\\ud800\"}", 1, 8,
               "unpaired UTF-16 surrogate in string is not supported");
  expect_error(c, d, "{\"a\": \"\\u0000\"}", 1, 8, "strings containing \\u0000 are not supported");
  expect_error(c, d, "{\"a\": \"\xc3\x28\"}", 1, 8, "invalid UTF-8 in string");
  expect_error(c, d, "{\"a\": \"open", 1, 7, "malformed JSON: unterminated string");
  amk_diag_free(d);
}

int main(void) {
  UnitCounts counts = {0, 0};
  AmkArena arena = {0};
  test_strings(&counts);
  test_values(&counts, &arena);
  test_module(&counts);
  test_reader(&counts);
  amk_arena_free(&arena);
  return unit_finish("test_json_writer", &counts);
}
