/* The pass manager (amk/pipeline.h): pipeline strings, typed options, and a
 * run with its callbacks, timing and statistics. */
#include <stdlib.h>
#include <string.h>

#include "amk/io.h"
#include "amk/pipeline.h"
#include "unit.h"

/* A chain x -> a -> b -> y, plus e from x (as test/passes/Inputs/chain.amkir). */
static const char chain_text[] =
    "amkir 0.2.0, abi 0.2\n"
    "target h100\n"
    "buffer %x : f32[1, 8] io_input\n"
    "buffer %a : f32[1, 8] activation\n"
    "buffer %b : f32[1, 8] activation\n"
    "buffer %e : f32[1, 8] activation\n"
    "buffer %y : f32[1, 8] io_output\n"
    "buffer %z : f32[1, 8] io_output\n"
    "counter #a \"a\"\n"
    "counter #b \"b\"\n"
    "counter #e \"e\"\n"
    "counter #y \"y\"\n"
    "counter #z \"z\"\n"
    "task 0 copy(%x) -> %a signal #a label \"a\"\n"
    "task 1 gelu(%a) -> %b wait #a >= 1 signal #b label \"b\"\n"
    "task 2 copy(%b) -> %y wait #b >= 1 signal #y label \"y\"\n"
    "task 3 gelu(%x) -> %e signal #e label \"e\"\n"
    "task 4 copy(%e) -> %z wait #e >= 1 signal #z label \"z\"\n";

static AmkModule *chain(AmkDiagEngine *diag) {
  return amk_parse_text("chain.amkir", chain_text, strlen(chain_text), diag);
}

/* The only captured diagnostic's message (or "" when not exactly one), then
 * forgets the captured ones. */
static char last_message[512];
static const char *take_message(AmkDiagEngine *diag) {
  last_message[0] = '\0';
  if (amk_diag_captured_count(diag) == 1)
    snprintf(last_message, sizeof last_message, "%s", amk_diag_captured(diag, 0)->message);
  amk_diag_clear_captured(diag);
  return last_message;
}

static char *text_of(const AmkPipeline *p) {
  static char buf[256];
  char *t = amk_pipeline_text(p);
  snprintf(buf, sizeof buf, "%s", t);
  free(t);
  return buf;
}

static void test_parse(UnitCounts *c, AmkDiagEngine *diag) {
  AmkPipeline *p = amk_pipeline_new();
  CHECK(c, amk_pipeline_parse(p, "import,tile,fuse", diag));
  CHECK(c, amk_pipeline_size(p) == 3);
  CHECK_STR(c, amk_pipeline_pass_at(p, 1)->name, "tile");
  CHECK(c, amk_pipeline_pass_at(p, 3) == NULL);
  CHECK(c, amk_pipeline_transforms(p));
  /* One flag at a time, as a driver collects -pass flags, appends. */
  CHECK(c, amk_pipeline_add_pass(p, "simulate-adversarial=32", diag));
  CHECK_STR(c, text_of(p), "import,tile,fuse,simulate-adversarial=32");
  CHECK(c, amk_pipeline_parse(p, "", diag) && amk_pipeline_size(p) == 4);

  /* Bad lists add nothing (not even their good elements) and say why. */
  CHECK(c, !amk_pipeline_parse(p, "verify,tiel", diag));
  CHECK_STR(c, take_message(diag), "unknown pass 'tiel'; did you mean 'tile'?");
  CHECK(c, !amk_pipeline_parse(p, "verify,nosuchpassatall", diag));
  CHECK_STR(c, take_message(diag), "unknown pass 'nosuchpassatall'");
  CHECK(c, !amk_pipeline_parse(p, "verify,,color", diag));
  CHECK_STR(c, take_message(diag), "pipeline 'verify,,color': element 2 is empty");
  CHECK(c, !amk_pipeline_parse(p, "verify,", diag));
  CHECK_STR(c, take_message(diag), "pipeline 'verify,': element 2 is empty");
  CHECK(c, !amk_pipeline_parse(p, ",verify", diag));
  CHECK_STR(c, take_message(diag), "pipeline ',verify': element 1 is empty");
  CHECK(c, !amk_pipeline_parse(p, "=3", diag));
  CHECK_STR(c, take_message(diag), "pipeline element '=3' names no pass");
  CHECK(c, !amk_pipeline_parse(p, "verify,tile=3", diag));
  CHECK_STR(c, take_message(diag), "pass 'tile' takes no value (given 'tile=3')");
  CHECK(c, !amk_pipeline_parse(p, "simulate-adversarial=abc", diag));
  CHECK_STR(c, take_message(diag),
            "-simulate-adversarial must be an integer in [1, 1000000], not 'abc'");
  CHECK(c, !amk_pipeline_add_pass(p, "simulate-adversarial=0", diag));
  CHECK_STR(c, take_message(diag),
            "-simulate-adversarial must be an integer in [1, 1000000], not '0'");
  CHECK(c, !amk_pipeline_add_pass(p, "simulate-adversarial=", diag));
  CHECK_STR(c, take_message(diag),
            "-simulate-adversarial must be an integer in [1, 1000000], not ''");
  CHECK(c, amk_pipeline_size(p) == 4);
  CHECK_STR(c, text_of(p), "import,tile,fuse,simulate-adversarial=32");
  amk_pipeline_free(p);

  /* The default pipeline is a valid pipeline that starts with import. */
  p = amk_pipeline_new();
  CHECK(c, amk_pipeline_parse(p, AMK_DEFAULT_PIPELINE, diag));
  CHECK(c, amk_pipeline_size(p) == 5);
  CHECK_STR(c, amk_pipeline_pass_at(p, 0)->name, "import");
  amk_pipeline_free(p);
}

static void test_options(UnitCounts *c, AmkDiagEngine *diag) {
  AmkPipeline *p = amk_pipeline_new();
  const struct {
    const char *key, *value, *message; /* message NULL: accepted */
  } cases[] = {
      {"max-seq", "16", NULL},
      {"max-seq", "16777216", NULL},
      {"max-seq", "abc", "import: --max-seq must be an integer in [1, 16777216], not 'abc'"},
      {"max-seq", "12x", "import: --max-seq must be an integer in [1, 16777216], not '12x'"},
      {"max-seq", "0", "import: --max-seq must be an integer in [1, 16777216], not '0'"},
      {"max-seq", "16777217",
       "import: --max-seq must be an integer in [1, 16777216], not '16777217'"},
      {"max-seq", " 5", "import: --max-seq must be an integer in [1, 16777216], not ' 5'"},
      {"max-seq", "+5", "import: --max-seq must be an integer in [1, 16777216], not '+5'"},
      {"max-seq", "99999999999999999999",
       "import: --max-seq must be an integer in [1, 16777216], not '99999999999999999999'"},
      {"kv-partitions", "9", "tile: --kv-partitions must be an integer in [1, 8], not '9'"},
      {"dtype", "BF16", NULL},
      {"dtype", "bf15", "import: --dtype must be f32, bf16 or f16, not 'bf15'; did you mean 'bf16'?"},
      {"dtype", "float", "import: --dtype must be f32, bf16 or f16, not 'float'"},
      {"page-allocation", "graph_colour",
       "color: --page-allocation must be linear, graph_color or none, not 'graph_colour'; did "
       "you mean 'graph_color'?"},
      {"fusion", "", "fuse: --fusion needs a value, not ''"},
      {"fusion", "rmsnorm+gemv", NULL},
      {"max-sq", "5", "unknown pass option '--max-sq'; did you mean '--max-seq'?"},
      {"colour", "5", "unknown pass option '--colour'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    bool ok = amk_pipeline_set_option(p, cases[i].key, cases[i].value, diag);
    CHECK(c, ok == (cases[i].message == NULL));
    if (cases[i].message)
      CHECK_STR(c, take_message(diag), cases[i].message);
  }
  amk_pipeline_free(p);

  /* Real values and negative ranges (no registered option has them yet). */
  const AmkPassOptionInfo ratio = {"ratio", "demo", AMK_OPTION_REAL, -1, 2.5, NULL, ""};
  const AmkPassOptionInfo offset = {"offset", "demo", AMK_OPTION_INT, -8, 8, NULL, ""};
  AmkOptionValue parsed;
  CHECK(c, amk_pass_option_parse(&ratio, "2.5", &parsed, diag) && parsed.as.real == 2.5);
  CHECK(c, amk_pass_option_parse(&ratio, "-0.25", &parsed, diag) && parsed.as.real == -0.25);
  CHECK(c, amk_pass_option_parse(&ratio, "1e-3", &parsed, diag) && parsed.as.real == 1e-3);
  CHECK_STR(c, parsed.text, "1e-3");
  const char *bad_reals[] = {"2.6", "nan", "inf", "", " 1", "1.5x", "1e999"};
  for (size_t i = 0; i < sizeof bad_reals / sizeof bad_reals[0]; i++) {
    char want[128];
    snprintf(want, sizeof want, "demo: --ratio must be a number in [-1, 2.5], not '%s'",
             bad_reals[i]);
    CHECK(c, !amk_pass_option_parse(&ratio, bad_reals[i], &parsed, diag));
    CHECK_STR(c, take_message(diag), want);
  }
  CHECK(c, amk_pass_option_parse(&offset, "-8", &parsed, diag) && parsed.as.i == -8);
  CHECK(c, !amk_pass_option_parse(&offset, "-9", &parsed, diag));
  CHECK_STR(c, take_message(diag), "demo: --offset must be an integer in [-8, 8], not '-9'");
  CHECK(c, !amk_pass_option_parse(&offset, "-", &parsed, diag));
  CHECK_STR(c, take_message(diag), "demo: --offset must be an integer in [-8, 8], not '-'");

  /* The typed reads a pass makes; a later value for a key wins. */
  const AmkPassOptionInfo *max_seq = amk_pass_option_lookup("max-seq");
  const AmkPassOptionInfo *dtype = amk_pass_option_lookup("dtype");
  const AmkPassOptionInfo *fusion = amk_pass_option_lookup("fusion");
  CHECK(c, max_seq && max_seq->type == AMK_OPTION_INT && strcmp(max_seq->pass, "import") == 0);
  CHECK(c, dtype && dtype->type == AMK_OPTION_ENUM);
  CHECK(c, amk_pass_option_lookup("nonesuch") == NULL);
  AmkOptionValue values[] = {
      {max_seq, "8", {.i = 8}},
      {dtype, "bf16", {.word = 1}},
      {fusion, "none", {.s = "none"}},
      {max_seq, "32", {.i = 32}},
      {&ratio, "0.5", {.real = 0.5}},
  };
  AmkPassContext ctx = {diag, values, 5, NULL};
  double real = 0;
  CHECK(c, amk_pass_option_real(&ctx, "ratio", &real) && real == 0.5);
  int64_t v = 0;
  size_t word = 9;
  CHECK(c, amk_pass_option_int(&ctx, "max-seq", &v) && v == 32);
  CHECK(c, amk_pass_option_enum(&ctx, "dtype", &word) && word == 1);
  CHECK_STR(c, amk_pass_option_string(&ctx, "fusion"), "none");
  CHECK(c, !amk_pass_option_int(&ctx, "kv-partitions", &v) && v == 32);
  CHECK(c, amk_pass_option_string(&ctx, "target") == NULL);
}

/* Records the callbacks in the order they fire. */
typedef struct {
  char log[1024];
} Recorder;

static void record(Recorder *r, const char *what, const char *pass) {
  size_t at = strlen(r->log);
  snprintf(r->log + at, sizeof r->log - at, "%s%s:%s", at ? " " : "", what, pass);
}

static void on_before(void *user, const AmkPassInfo *pass, const AmkModule *m) {
  record(user, "before", pass->name);
}

static void on_after(void *user, const AmkPassInfo *pass, const AmkModule *m, bool failed) {
  record(user, failed ? "after-failed" : "after", pass->name);
}

static void on_changed(void *user, const AmkPassInfo *pass, const char *before, const char *after,
                       bool is_changed) {
  /* The texts are the module's before and after the pass. */
  bool consistent = (strcmp(before, after) != 0) == is_changed;
  record(user, !consistent ? "changed-WRONG" : is_changed ? "changed" : "same", pass->name);
}

static void test_run(UnitCounts *c, AmkDiagEngine *diag) {
  AmkPipeline *p = amk_pipeline_new();
  CHECK(c, amk_pipeline_parse(p, "verify,sm-assign,color", diag));
  CHECK(c, amk_pipeline_set_option(p, "sm-assignment", "load_balance", diag));
  CHECK(c, amk_pipeline_set_option(p, "sm-assignment", "round_robin", diag)); /* wins */
  AmkModule *m = chain(diag);
  CHECK(c, m != NULL);
  if (!m) {
    amk_pipeline_free(p);
    return;
  }
  Recorder rec = {{0}};
  AmkStats *stats = amk_stats_new();
  AmkTimings *timings = amk_timings_new();
  AmkPipelineRunOptions run = {
      .verify_each = true,
      .stats = stats,
      .timings = timings,
      .print_before = "color",
      .print_after_all = true,
      .print_changed = true,
      .user = &rec,
      .before_pass = on_before,
      .after_pass = on_after,
      .changed = on_changed,
  };
  AmkPipelineResult r = amk_pipeline_run(p, m, diag, &run);
  CHECK(c, r.status == AMK_PIPELINE_OK && r.failed_pass == NULL && r.passes_run == 3);
  CHECK_STR(c, rec.log,
            "after:verify same:verify after:sm-assign changed:sm-assign before:color "
            "after:color changed:color");
  /* round_robin deals tasks in topological order: a, e, b, z, y. */
  CHECK(c, m->tasks[0].sm == 0 && m->tasks[1].sm == 1);
  /* Every pass and the per-pass verification were timed, in order. */
  CHECK(c, amk_timings_count(timings) == 4);
  double wall = -1, user = -1;
  CHECK_STR(c, amk_timings_at(timings, 0, &wall, &user), "verify");
  CHECK(c, wall >= 0 && user >= 0);
  CHECK_STR(c, amk_timings_at(timings, 1, NULL, NULL), "sm-assign");
  CHECK_STR(c, amk_timings_at(timings, 2, NULL, NULL), "verify (each)");
  CHECK_STR(c, amk_timings_at(timings, 3, NULL, NULL), "color");
  CHECK(c, amk_timings_at(timings, 4, NULL, NULL) == NULL);
  /* The passes recorded their statistics. */
  const char *pass = NULL, *name = NULL, *value = NULL;
  CHECK(c, amk_stats_count(stats) > 2);
  CHECK(c, amk_stats_at(stats, 0, &pass, &name, &value) && strcmp(pass, "sm-assign") == 0);
  bool saw_policy = false;
  for (size_t i = 0; amk_stats_at(stats, i, &pass, &name, &value); i++)
    if (strcmp(pass, "sm-assign") == 0 && strcmp(name, "policy") == 0)
      saw_policy = strcmp(value, "round_robin") == 0;
  CHECK(c, saw_policy);

  /* The same pipeline again (it is a value): stages sum up, none is added. */
  AmkModule *again = chain(diag);
  r = amk_pipeline_run(p, again, diag, &(AmkPipelineRunOptions){.timings = timings});
  CHECK(c, r.status == AMK_PIPELINE_OK && amk_timings_count(timings) == 4);
  CHECK(c, again->tasks[1].sm == m->tasks[1].sm);
  amk_module_free(again);

  /* A failing pass stops the pipeline; the after hook says it failed. */
  AmkPipeline *failing = amk_pipeline_new();
  CHECK(c, amk_pipeline_parse(failing, "verify,import,color", diag));
  rec.log[0] = '\0';
  run.print_before = NULL;
  run.print_changed = false;
  r = amk_pipeline_run(failing, m, diag, &run);
  CHECK(c, r.status == AMK_PIPELINE_PASS_FAILED && r.passes_run == 2);
  CHECK(c, r.failed_pass && strcmp(r.failed_pass->name, "import") == 0);
  CHECK_STR(c, rec.log, "after:verify after-failed:import");
  CHECK(c, amk_diag_captured_count(diag) >= 1); /* import said why */
  amk_diag_clear_captured(diag);

  /* No options at all: nothing printed, timed or collected. */
  r = amk_pipeline_run(p, m, diag, NULL);
  CHECK(c, r.status == AMK_PIPELINE_OK);

  amk_pipeline_free(failing);
  amk_module_free(m);
  amk_stats_free(stats);
  amk_timings_free(timings);
  amk_pipeline_free(p);
}

int main(void) {
  UnitCounts c = {0};
  AmkDiagEngine *diag = amk_diag_new(stderr);
  amk_diag_set_capture(diag, 1);
  test_parse(&c, diag);
  test_options(&c, diag);
  test_run(&c, diag);
  amk_diag_free(diag);
  return unit_finish("test_pipeline", &c);
}
