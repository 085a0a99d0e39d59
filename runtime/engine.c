/* The engine interface (include/amk/engine.h): calls through an engine's
 * ops table, so this layer depends on no engine. */
#include <stdlib.h>

#include "amk/engine.h"

struct AmkEngine {
  const AmkEngineOps *ops;
  const AmkPlan *plan;
  void *self;
};

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

AmkEngineOptions amk_engine_options_default(void) {
  return (AmkEngineOptions){.use_cache = true};
}

AmkEngine *amk_engine_create(const AmkEngineOps *ops, const AmkPlan *plan,
                             const AmkWeights *weights, const AmkEngineOptions *opt,
                             AmkDiagEngine *diag) {
  AmkEngineOptions used = opt ? *opt : amk_engine_options_default();
  used.share_self = NULL;
  if (used.share_with) {
    if (used.share_with->ops != ops) {
      amk_error(diag, no_loc(), "a %s engine cannot use the device copies of a %s engine",
                ops->name, used.share_with->ops->name);
      return NULL;
    }
    used.share_self = used.share_with->self;
  }
  void *self = ops->create(plan, weights, &used, diag);
  if (!self)
    return NULL;
  AmkEngine *e = amk_xcalloc(1, sizeof *e);
  *e = (AmkEngine){.ops = ops, .plan = plan, .self = self};
  return e;
}

void amk_engine_free(AmkEngine *e) {
  if (!e)
    return;
  e->ops->destroy(e->self);
  free(e);
}

const char *amk_engine_name(const AmkEngine *e) { return e->ops->name; }
const AmkPlan *amk_engine_plan(const AmkEngine *e) { return e->plan; }

AmkStepStatus amk_engine_step(AmkEngine *e, int32_t token, int64_t pos, float *kernel_ms,
                              AmkDiagEngine *diag) {
  return e->ops->step(e->self, token, pos, kernel_ms, diag);
}

const float *amk_engine_logits(const AmkEngine *e, size_t *n) {
  return e->ops->logits(e->self, n);
}

bool amk_engine_reset(AmkEngine *e, AmkDiagEngine *diag) { return e->ops->reset(e->self, diag); }

int64_t amk_engine_max_seq(const AmkEngine *e) { return e->plan->max_seq; }
int64_t amk_engine_vocab(const AmkEngine *e) { return e->plan->vocab; }
int64_t amk_engine_weight_bytes(const AmkEngine *e) { return e->plan->weight_bytes; }

bool amk_engine_measures_kernel_time(const AmkEngine *e) { return e->ops->measures_kernel_time; }

const char *amk_engine_describe(const AmkEngine *e) {
  return e->ops->describe ? e->ops->describe(e->self) : e->ops->name;
}

double amk_engine_measure_read_bw(AmkEngine *e, size_t bytes, int reps, AmkDiagEngine *diag) {
  return e->ops->measure_read_bw ? e->ops->measure_read_bw(e->self, bytes, reps, diag) : -1;
}

void amk_engine_set_tracing(AmkEngine *e, bool on) {
  if (e->ops->set_tracing)
    e->ops->set_tracing(e->self, on);
}

bool amk_engine_trace(AmkEngine *e, struct AmkTrace *out, AmkDiagEngine *diag) {
  if (!e->ops->trace) {
    amk_error(diag, no_loc(), "the %s engine records no traces", e->ops->name);
    return false;
  }
  return e->ops->trace(e->self, out, diag);
}

bool amk_engine_can_prefill(const AmkEngine *e) {
  return e->ops->step_rows && e->ops->share_kv && e->ops->logit_rows;
}

AmkStepStatus amk_engine_step_rows(AmkEngine *e, const int32_t *tokens, int64_t n, int64_t pos,
                                   AmkDiagEngine *diag) {
  if (n == 1 && e->plan->rows == 1)
    return e->ops->step(e->self, tokens[0], pos, NULL, diag);
  if (!e->ops->step_rows) {
    amk_error(diag, no_loc(), "the %s engine does not run prefill programs", e->ops->name);
    return AMK_STEP_ERROR;
  }
  return e->ops->step_rows(e->self, tokens, n, pos, diag);
}

const float *amk_engine_logit_rows(const AmkEngine *e, size_t *rows, size_t *vocab) {
  if (e->ops->logit_rows)
    return e->ops->logit_rows(e->self, rows, vocab);
  *rows = 1;
  return e->ops->logits(e->self, vocab);
}

bool amk_engine_share_kv(AmkEngine *e, const AmkEngine *from, AmkDiagEngine *diag) {
  if (!e->ops->share_kv || e->ops != from->ops) {
    amk_error(diag, no_loc(), "the %s engine cannot share the KV caches of the %s engine",
              e->ops->name, from->ops->name);
    return false;
  }
  return e->ops->share_kv(e->self, from->self, diag);
}

void *amk_engine_kv_data(AmkEngine *e, uint32_t b, size_t *nbytes) {
  *nbytes = 0;
  return e->ops->kv_data ? e->ops->kv_data(e->self, b, nbytes) : NULL;
}

bool amk_engine_copies_kv_on_device(const AmkEngine *to, const AmkEngine *from) {
  return to->ops == from->ops && to->ops->copy_kv_rows != NULL;
}

bool amk_engine_copy_kv_device(AmkEngine *to, const AmkEngine *from, const AmkKvRowCopy *copies,
                               uint32_t n, int64_t row_begin, int64_t row_end,
                               AmkDiagEngine *diag) {
  if (!amk_engine_copies_kv_on_device(to, from)) {
    amk_error(diag, no_loc(), "the %s engine cannot copy KV rows from the %s engine on the device",
              to->ops->name, from->ops->name);
    return false;
  }
  return to->ops->copy_kv_rows(to->self, from->self, copies, n, row_begin, row_end, diag);
}

bool amk_engine_can_generate(const AmkEngine *e) { return e->ops->generate != NULL; }

AmkStepStatus amk_engine_generate(AmkEngine *e, const AmkGenerate *g, double *kernel_ms,
                                  AmkDiagEngine *diag) {
  if (!e->ops->generate) {
    amk_error(diag, no_loc(), "the %s engine does not decode by itself", e->ops->name);
    return AMK_STEP_ERROR;
  }
  return e->ops->generate(e->self, g, kernel_ms, diag);
}
