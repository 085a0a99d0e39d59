/* validate, verify and the simulators on modules built in memory: the synth
 * lowering (same counts as the reference's toy), ids that are not list
 * positions, programs above the reference's 8000-task cap, deep chains and
 * long cycles (no recursion anywhere), and structural errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/diag.h"
#include "amk/pass.h"
#include "amk/synth.h"
#include "amk/validate.h"
#include "unit.h"
#include "../../passes/validate_internal.h"

/* The first captured error message, or "" when none. */
static const char *first_error(const AmkDiagEngine *d) {
  for (size_t i = 0; i < amk_diag_captured_count(d); i++)
    if (amk_diag_captured(d, i)->severity == AMK_SEVERITY_ERROR)
      return amk_diag_captured(d, i)->message;
  return "";
}

static bool has_error(const AmkDiagEngine *d, const char *message) {
  for (size_t i = 0; i < amk_diag_captured_count(d); i++)
    if (strcmp(amk_diag_captured(d, i)->message, message) == 0)
      return true;
  return false;
}

static AmkDiagEngine *capture(void) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  return d;
}

static bool starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* A task by label (synth labels are unique). */
static AmkTask *task_labelled(AmkModule *m, const char *label) {
  for (uint32_t t = 0; t < m->n_tasks; t++)
    if (m->tasks[t].label && strcmp(m->tasks[t].label, label) == 0)
      return &m->tasks[t];
  return NULL;
}

/* A linear chain of n COPY tasks through n+1 buffers: task i waits on
 * counter i-1; with `close_cycle` task 0 also waits on the last counter. */
static AmkModule *chain(uint32_t n, bool close_cycle) {
  AmkModule *m = amk_module_new();
  for (uint32_t i = 0; i <= n; i++) {
    AmkBuffer *b = amk_module_add_buffer(m);
    b->id = (int32_t)i;
    char name[16];
    snprintf(name, sizeof name, "b%u", i);
    b->name = amk_arena_strdup(&m->arena, name);
    b->kind = i == 0 ? AMK_KIND_IO_INPUT : AMK_KIND_ACTIVATION;
    b->rank = 1;
    b->shape = amk_arena_alloc(&m->arena, sizeof(AmkValue));
    b->shape[0] = amk_value_int(4);
  }
  for (uint32_t i = 0; i < n; i++) {
    AmkCounter *c = amk_module_add_counter(m);
    c->id = (int32_t)i;
  }
  for (uint32_t i = 0; i < n; i++) {
    AmkTask *t = amk_module_add_task(m);
    t->id = (int32_t)i;
    t->op = AMK_OP_COPY;
    t->n_inputs = t->n_outputs = 1;
    t->inputs = amk_arena_alloc(&m->arena, sizeof(int32_t));
    t->outputs = amk_arena_alloc(&m->arena, sizeof(int32_t));
    t->inputs[0] = (int32_t)i;
    t->outputs[0] = (int32_t)i + 1;
    t->out_counter = (int32_t)i;
    t->label = "";
    bool waits = i > 0 || close_cycle;
    t->n_waits = waits ? 1 : 0;
    t->waits = amk_arena_alloc(&m->arena, sizeof(AmkWait));
    t->waits[0].counter = i > 0 ? (int32_t)i - 1 : (int32_t)n - 1;
    t->waits[0].threshold = amk_value_int(1);
  }
  return m;
}

/* Validation through one reused workspace gives the same verdict, stats
 * and messages as the one-off API, whatever ran in the workspace before. */
static bool same_as_one_off(AmkValidatorWorkspace *ws, const AmkModule *m) {
  AmkDiagEngine *a = capture(), *b = capture();
  AmkValidateResult ra, rb;
  bool oka = amk_validate_module(m, a, NULL, &ra);
  bool okb = amk_validate_module_ws(ws, m, b, NULL, &rb);
  bool same = oka == okb && ra.tasks == rb.tasks && ra.edges == rb.edges &&
              ra.errors == rb.errors && ra.warnings == rb.warnings &&
              amk_diag_captured_count(a) == amk_diag_captured_count(b);
  for (size_t i = 0; same && i < amk_diag_captured_count(a); i++)
    same = strcmp(amk_diag_captured(a, i)->message,
                  amk_diag_captured(b, i)->message) == 0;
  amk_diag_free(a);
  amk_diag_free(b);
  return same;
}

static void test_workspace_and_params(UnitCounts *c) {
  /* The validator's param-name lookup agrees with the table's. */
  static const char *const other[] = {"", "k", "kv", "kv_", "n", "n_", "n_o",
                                      "N_til", "N_tiles", "K2", "hiddenx",
                                      "n_kv", "n_kv_head", "posx", "recipe",
                                      "M_", "scal", "thetas", "e", "zzz"};
  bool agree = true;
  for (int f = 0; f < AMK_PARAM_COUNT; f++)
    agree = agree && amk_validator_param_field(amk_param_name((AmkParamField)f)) == f;
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
    agree = agree && amk_validator_param_field(other[i]) ==
                         amk_param_from_name(other[i]);
  CHECK(c, agree && amk_validator_param_field(NULL) == -1);

  AmkValidatorWorkspace *ws = amk_validator_workspace_new();
  AmkSynthSpec toy = amk_synth_toy_spec();
  AmkModule *big = amk_synth_llama(&toy);
  AmkModule *small = chain(6, false);
  small->tasks[2].n_waits = 0; /* a race: errors through the workspace */
  AmkModule *sparse = chain(5, false);
  for (uint32_t i = 0; i < sparse->n_counters; i++) /* no dense slot table */
    sparse->counters[i].id = (int32_t)i * 100000;
  for (uint32_t i = 0; i < sparse->n_tasks; i++) {
    sparse->tasks[i].out_counter *= 100000;
    if (sparse->tasks[i].n_waits)
      sparse->tasks[i].waits[0].counter *= 100000;
  }
  CHECK(c, same_as_one_off(ws, big));
  CHECK(c, same_as_one_off(ws, small));
  CHECK(c, same_as_one_off(ws, big));
  CHECK(c, same_as_one_off(ws, sparse));
  AmkDiagEngine *d = capture();
  CHECK(c, amk_validate_module_ws(ws, sparse, d, NULL, NULL));
  CHECK(c, !amk_validate_module_ws(ws, small, d, NULL, NULL));
  amk_diag_free(d);
  amk_module_free(big);
  amk_module_free(small);
  amk_module_free(sparse);
  amk_validator_workspace_free(ws);
  amk_validator_workspace_free(NULL);
}

int main(void) {
  UnitCounts c = {0};
  test_workspace_and_params(&c);

  /* The toy lowering: the reference's stats for toy2L_pos0.amk.json. */
  AmkSynthSpec toy = amk_synth_toy_spec();
  CHECK(&c, amk_synth_task_count(&toy) == 66);
  AmkModule *m = amk_synth_llama(&toy);
  AmkDiagEngine *d = capture();
  AmkValidateResult r;
  CHECK(&c, amk_validate_module(m, d, NULL, &r));
  CHECK(&c, r.tasks == 66 && r.buffers == 65 && r.counters == 41 &&
                r.edges == 93 && r.acyclic && !r.sm_assigned &&
                r.errors == 0 && r.warnings == 0);
  char summary[256];
  amk_validate_format_summary(&r, summary, sizeof summary);
  CHECK_STR(&c, summary,
            "[VALID] {'tasks': 66, 'buffers': 65, 'counters': 41, 'edges': 93, "
            "'acyclic': True, 'weight_MB': 0.43, 'sm_assigned': False}");
  CHECK(&c, amk_verify_module(m, d));

  /* Firing in list-order sweeps fires the toy in list order. */
  uint32_t order[66];
  CHECK(&c, amk_simulate_counters(m, d, order) == 0);
  bool in_order = true;
  for (uint32_t i = 0; i < 66; i++)
    in_order = in_order && order[i] == i;
  CHECK(&c, in_order);
  CHECK(&c, amk_simulate_adversarial(m, d, 64) == 0);
  CHECK(&c, amk_diag_error_count(d) == 0);

  /* Ids that are not list positions are supported (nothing names task ids). */
  for (uint32_t t = 0; t < m->n_tasks; t++)
    m->tasks[t].id += 1000;
  CHECK(&c, amk_validate_module(m, d, NULL, NULL));
  CHECK(&c, amk_verify_module(m, d));
  /* ... but duplicates are rejected by both. */
  m->tasks[5].id = m->tasks[4].id;
  CHECK(&c, !amk_validate_module(m, d, NULL, NULL));
  CHECK(&c, starts_with(first_error(d), "duplicate task id 1004"));
  amk_diag_clear_captured(d);
  CHECK(&c, !amk_verify_module(m, d));
  CHECK_STR(&c, first_error(d), "tasks[5]: duplicate task id 1004 (first at tasks[4])");
  amk_diag_clear_captured(d);
  amk_module_free(m);

  /* Above the reference's 8000-task cap every check still runs: a dropped
   * wait deep in the program is a race. */
  AmkSynthSpec big = toy;
  big.layers = 400;
  m = amk_synth_llama(&big);
  CHECK(&c, m && m->n_tasks > 8000);
  CHECK(&c, amk_validate_module(m, d, NULL, NULL));
  AmkTask *res = task_labelled(m, "L399.attn_residual");
  CHECK(&c, res && res->n_waits == 2);
  if (res) {
    res->n_waits = 1; /* drop the wait on the o_proj tiles */
    CHECK(&c, !amk_validate_module(m, d, NULL, NULL));
    CHECK(&c, strstr(first_error(d), "(L399.attn_residual) reads buffer") &&
                  strstr(first_error(d), "are NOT ordered before it, data RACE"));
    CHECK(&c, amk_simulate_adversarial(m, d, 2) > 0);
  }
  amk_diag_clear_captured(d);
  amk_module_free(m);

  /* A 200k-deep chain validates; a 200k-long cycle is reported with its
   * witness (iterative DFS: no stack overflow). */
  m = chain(200000, false);
  CHECK(&c, amk_validate_module(m, d, NULL, NULL));
  CHECK(&c, amk_simulate_counters(m, d, NULL) == 0);
  amk_module_free(m);
  m = chain(200000, true);
  CHECK(&c, !amk_validate_module(m, d, NULL, &r));
  CHECK(&c, !r.acyclic);
  CHECK(&c, starts_with(first_error(d),
                        "producer\u2192consumer graph has a CYCLE, structural "
                        "deadlock. cycle: 0:COPY -> 1:COPY -> 2:COPY"));
  amk_diag_clear_captured(d);
  CHECK(&c, amk_simulate_counters(m, d, NULL) == 200000);
  amk_diag_clear_captured(d);
  amk_module_free(m);

  /* Reading through a transitive (not direct) path is race-free: in a chain
   * task i reads buffer i which task i-1 wrote; make task 3 also read
   * buffer 1 (written by task 0, an ancestor through 1 and 2). */
  m = chain(6, false);
  m->tasks[3].n_inputs = 2;
  int32_t *ins = amk_arena_alloc(&m->arena, 2 * sizeof(int32_t));
  ins[0] = 3;
  ins[1] = 1;
  m->tasks[3].inputs = ins;
  m->tasks[3].op = AMK_OP_ADD;
  CHECK(&c, amk_validate_module(m, d, NULL, NULL));
  /* Cut the path (task 2 no longer waits): now task 0 is not an ancestor. */
  m->tasks[2].n_waits = 0;
  CHECK(&c, !amk_validate_module(m, d, NULL, NULL));
  CHECK_STR(&c, first_error(d),
            "task 2 () reads buffer #2 ('b2') but writer task(s) [1] are NOT "
            "ordered before it, data RACE");
  CHECK(&c, has_error(d, "task 3 () reads buffer #1 ('b1') but writer "
                         "task(s) [0] are NOT ordered before it, data RACE"));
  amk_diag_clear_captured(d);
  amk_module_free(m);

  /* Structural errors: dangling references, odd thresholds, big ranks. */
  m = chain(3, false);
  m->tasks[1].inputs[0] = 77;
  m->tasks[2].waits[0].threshold.kind = AMK_VALUE_BOOL;
  m->tasks[2].waits[0].threshold.as.b = true;
  m->buffers[0].rank = 5;
  m->buffers[0].shape = amk_arena_alloc(&m->arena, 5 * sizeof(AmkValue));
  for (int i = 0; i < 5; i++)
    m->buffers[0].shape[i] = amk_value_int(1);
  CHECK(&c, !amk_verify_module(m, d));
  CHECK(&c, amk_diag_captured_count(d) == 3);
  CHECK_STR(&c, amk_diag_captured(d, 0)->message,
            "buffers[0]: buffer #0 ('b0') rank 5 > ABI_MAX_RANK=4");
  CHECK_STR(&c, amk_diag_captured(d, 1)->message,
            "tasks[1].inputs[0]: task 1 () reads missing buffer 77");
  CHECK_STR(&c, amk_diag_captured(d, 2)->message,
            "tasks[2].waits[0].threshold: task 2 () threshold True on counter "
            "1 must be an integer >= 1");
  amk_diag_clear_captured(d);
  CHECK(&c, !amk_validate_module(m, d, NULL, NULL));
  CHECK_STR(&c, first_error(d), "task 0 buffer 0 rank 5 > ABI_MAX_RANK=4");
  amk_diag_clear_captured(d);
  amk_module_free(m);

  /* Nonsensical synth specs are refused, not built. */
  AmkSynthSpec bad = toy;
  bad.n_kv_heads = 3;
  CHECK(&c, amk_synth_llama(&bad) == NULL);
  bad = toy;
  bad.pos = bad.max_seq;
  CHECK(&c, amk_synth_llama(&bad) == NULL);

  amk_diag_free(d);
  return unit_finish("test_validate", &c);
}
