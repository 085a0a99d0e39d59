/* Batched prefill (docs/Runtime.md "Prefill"): the prompt goes in chunks of
 * at most -b tokens, each one step of a prefill program compiled from the
 * model folder for the chunk's row count (the batch size, and the
 * remainder). The programs are compiled when first needed and kept; each
 * runs on the decode engine's KV caches (shared by name) and weights
 * (borrowed by source), so decoding continues on the cache the prompt
 * filled. On the GPU the prefill engine uses the decode engine's device
 * copies of both (no second upload). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/backend.h"
#include "amk/plan.h"
#include "amk/vm.h"
#include "amk/weights.h"
#include "run.h"

/* Row counts compiled for at once: the batch size and a remainder or two
 * (chat turns differ); beyond this the oldest remainder is replaced. */
enum { MAX_PROGRAMS = 4 };

typedef struct {
  int64_t rows;
  AmkModule *m;
  AmkPlan *plan;
  AmkWeights *weights;
  AmkEngine *engine;
} PrefillProgram;

struct RunPrefill {
  const RunOptions *o;
  const AmkWeights *weights; /* the decode program's */
  AmkEngine *decode;
  bool all_logits; /* --dump-logits: every row's logits */
  PrefillProgram programs[MAX_PROGRAMS];
  int n_programs;
  AmkEngine *last; /* the engine of the last chunk */
};

static void program_free(PrefillProgram *p) {
  amk_engine_free(p->engine);
  amk_weights_free(p->weights);
  amk_plan_free(p->plan);
  amk_module_free(p->m);
  memset(p, 0, sizeof *p);
}

RunPrefill *run_prefill_new(const RunOptions *o, const AmkWeights *weights, AmkEngine *decode) {
  RunPrefill *p = amk_xcalloc(1, sizeof *p);
  *p = (RunPrefill){.o = o, .weights = weights, .decode = decode,
                    .all_logits = o->dump_logits != NULL};
  return p;
}

void run_prefill_free(RunPrefill *p) {
  if (!p)
    return;
  for (int i = 0; i < p->n_programs; i++)
    program_free(&p->programs[i]);
  free(p);
}

/* The program for chunks of `rows` tokens, compiled on first use. */
static const PrefillProgram *program_for(RunPrefill *p, int64_t rows, AmkDiagEngine *diag) {
  for (int i = 0; i < p->n_programs; i++)
    if (p->programs[i].rows == rows)
      return &p->programs[i];
  PrefillProgram next = {.rows = rows};
  AmkEngineOptions eopt = amk_engine_options_default();
  eopt.threads = (int)p->o->threads;
  eopt.timeout_ms = p->o->timeout_ms;
  eopt.share_with = p->decode; /* the GPU's weights and KV caches, in place */
  bool ok = (next.m = run_compile_folder(p->o, 0, NULL, rows, p->all_logits, diag)) != NULL &&
            (next.plan = amk_plan_build(next.m, NULL, diag)) != NULL &&
            (next.weights = amk_weights_share(next.plan, p->weights, diag)) != NULL;
  /* An engine of the decode engine's kind, on its caches. */
  const char *kind = amk_engine_name(p->decode);
  const AmkEngineOps *ops = strcmp(kind, "cpu") == 0    ? amk_vm_engine()
                            : strcmp(kind, "cuda") == 0 ? amk_cuda_engine()
                                                        : NULL;
  if (ok && !ops) {
    fprintf(stderr, "amk-run: error: the %s engine runs no prefill programs\n",
            amk_engine_name(p->decode));
    ok = false;
  }
  ok = ok && (next.engine = amk_engine_create(ops, next.plan, next.weights, &eopt, diag)) &&
       amk_engine_share_kv(next.engine, p->decode, diag);
  if (!ok) {
    program_free(&next);
    return NULL;
  }
  int slot = p->n_programs < MAX_PROGRAMS ? p->n_programs++ : MAX_PROGRAMS - 1;
  if (p->programs[slot].m)
    program_free(&p->programs[slot]);
  p->programs[slot] = next;
  return &p->programs[slot];
}

int64_t run_prefill_batch(const RunPrefill *p) { return p->o->batch_size; }

AmkStepStatus run_prefill_chunk(RunPrefill *p, const int32_t *tokens, int64_t n, int64_t pos,
                                AmkDiagEngine *diag) {
  if (n == 1) {
    /* One token is a decode step. */
    p->last = p->decode;
    return amk_engine_step(p->decode, tokens[0], pos, NULL, diag);
  }
  const PrefillProgram *prog = program_for(p, n, diag);
  if (!prog)
    return AMK_STEP_ERROR;
  p->last = prog->engine;
  return amk_engine_step_rows(prog->engine, tokens, n, pos, diag);
}

const float *run_prefill_logits(const RunPrefill *p, size_t *rows, size_t *vocab) {
  return amk_engine_logit_rows(p->last, rows, vocab);
}
