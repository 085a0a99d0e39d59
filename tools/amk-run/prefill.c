/* Batched prefill (docs/Runtime.md "Prefill"): the prompt goes in chunks of
 * at most -b tokens, each one step of a prefill program compiled from the
 * model folder for the chunk's row count. With padding (the GPU's way) a
 * short chunk runs on the -b-row program, its rows past the chunk fed with
 * copies of its last token: one program serves every prompt length, so
 * NVRTC compiles one (at load, run_prefill_prepare). Padding rows change no
 * real row (attention is causal, every other op works row by row) and the
 * KV rows they write lie past the chunk, where the next token's step
 * writes before anything reads. Without padding (the CPU VM's way: each
 * compile is cheap there, each padding row a row of work) a chunk runs on
 * a program of its own row count. The programs are compiled when first
 * needed and kept; each
 * runs on the decode engine's weights (borrowed by source) and, when the
 * decode program keeps the prefill programs' kcache/vcache layout, on its
 * KV caches (shared by name), so decoding continues on the cache the
 * prompt filled. A fused decode program keeps per-head k|v caches instead:
 * the prefill programs then share one cache of their own layout, and each
 * chunk's rows are copied into the decode program's (and the rows decode
 * steps wrote since the last chunk copied back first; docs/Runtime.md).
 * On the GPU the prefill engine uses the decode engine's device copies of
 * the weights and KV caches (no second upload). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/backend.h"
#include "amk/engine.h"
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
  int64_t batch;    /* the most tokens a chunk takes */
  int64_t pad_rows; /* > 0: short chunks run on this many rows (padding) */
  int64_t last_rows; /* the real rows of the last chunk */
  PrefillProgram programs[MAX_PROGRAMS];
  int n_programs;
  AmkEngine *last; /* the engine of the last chunk */
  /* Copying KV rows (the decode program's caches are of another layout):
   * programs[0] owns the prefill layout's caches, which the other programs
   * share (it is never replaced); to_decode maps them into the decode
   * program's, from_decode back. Rows [0, synced) hold the same keys and
   * values in both. */
  bool copy_kv;
  AmkKvMap *to_decode, *from_decode;
  int64_t synced;
};

static void program_free(PrefillProgram *p) {
  amk_engine_free(p->engine);
  amk_weights_free(p->weights);
  amk_plan_free(p->plan);
  amk_module_free(p->m);
  memset(p, 0, sizeof *p);
}

RunPrefill *run_prefill_new(const RunOptions *o, const AmkWeights *weights, AmkEngine *decode,
                            bool pad, int64_t batch) {
  RunPrefill *p = amk_xcalloc(1, sizeof *p);
  int64_t max_seq = amk_engine_max_seq(decode);
  *p = (RunPrefill){.o = o, .weights = weights, .decode = decode, .batch = batch,
                    .all_logits = o->dump_logits != NULL,
                    .pad_rows = pad ? (batch < max_seq ? batch : max_seq) : 0};
  if (p->pad_rows < 2)
    p->pad_rows = 0;
  return p;
}

bool run_prefill_pads(const RunPrefill *p) { return p->pad_rows > 0; }

void run_prefill_free(RunPrefill *p) {
  if (!p)
    return;
  /* The others share programs[0]'s caches: it goes last. */
  for (int i = p->n_programs - 1; i >= 0; i--)
    program_free(&p->programs[i]);
  amk_kv_map_free(p->to_decode);
  amk_kv_map_free(p->from_decode);
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
  eopt.verbose = p->o->verbose && !p->o->json; /* the CUDA engine's description */
  /* The GPU's weights and KV caches, in place: the decode engine's, or,
   * where the caches are copied, the first prefill program's (its caches
   * of the prefill layout, the decode engine's weights). */
  eopt.share_with = p->copy_kv && p->n_programs > 0 ? p->programs[0].engine : p->decode;
  eopt.trace = p->o->trace != NULL; /* the bench traces one chunk (bench.c) */
  double t[5] = {run_now_ms()};
  bool ok = (next.m = run_compile_folder(p->o, 0, NULL, rows, p->all_logits, diag)) != NULL &&
            (t[1] = run_now_ms(), next.plan = amk_plan_build(next.m, NULL, diag)) != NULL &&
            (t[2] = run_now_ms(), next.weights = amk_weights_share(next.plan, p->weights, diag)) !=
                NULL;
  t[3] = run_now_ms();
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
  /* The first program decides how the caches meet: shared by name when
   * the decode program has the same ones, else copied through maps. */
  bool first = p->n_programs == 0;
  if (ok && first && !amk_kv_same_caches(next.plan, amk_engine_plan(p->decode))) {
    p->copy_kv = true;
    ok = (p->to_decode = amk_kv_map_new(amk_engine_plan(p->decode), next.plan, diag)) &&
         (p->from_decode = amk_kv_map_new(next.plan, amk_engine_plan(p->decode), diag));
  }
  ok = ok && (next.engine = amk_engine_create(ops, next.plan, next.weights, &eopt, diag)) &&
       (!p->copy_kv ? amk_engine_share_kv(next.engine, p->decode, diag)
        : first     ? true /* it owns the prefill layout's caches */
                    : amk_engine_share_kv(next.engine, p->programs[0].engine, diag));
  t[4] = run_now_ms();
  if (ok && eopt.verbose)
    fprintf(stderr,
            "amk-run: the %" PRId64 "-row prefill program: compiled in %.0f ms, validated and "
            "planned in %.0f ms, weights lent in %.0f ms, engine started in %.0f ms\n",
            rows, t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3]);
  if (!ok) {
    if (first) {
      amk_kv_map_free(p->to_decode);
      amk_kv_map_free(p->from_decode);
      p->to_decode = p->from_decode = NULL;
      p->copy_kv = false;
    }
    program_free(&next);
    return NULL;
  }
  /* Slot 0 is never replaced (it may own the caches the others share). */
  int slot = p->n_programs < MAX_PROGRAMS ? p->n_programs++ : MAX_PROGRAMS - 1;
  if (p->programs[slot].m)
    program_free(&p->programs[slot]);
  p->programs[slot] = next;
  return &p->programs[slot];
}

int64_t run_prefill_batch(const RunPrefill *p) { return p->batch; }

bool run_prefill_prepare(RunPrefill *p, AmkDiagEngine *diag) {
  return p->pad_rows == 0 || program_for(p, p->pad_rows, diag) != NULL;
}

/* The rows a chunk of n tokens at pos runs on: the padded size where the
 * cache has room for its padding rows, else n. */
static int64_t chunk_rows(const RunPrefill *p, int64_t n, int64_t pos) {
  if (p->pad_rows > n && pos + p->pad_rows <= amk_engine_max_seq(p->decode))
    return p->pad_rows;
  return n;
}

static AmkStepStatus step_program(const PrefillProgram *prog, const int32_t *tokens, int64_t n,
                                  int64_t pos, AmkDiagEngine *diag) {
  if (prog->rows == n)
    return amk_engine_step_rows(prog->engine, tokens, n, pos, diag);
  int32_t *padded = amk_xmalloc((size_t)prog->rows * sizeof *padded);
  memcpy(padded, tokens, (size_t)n * sizeof *padded);
  for (int64_t r = n; r < prog->rows; r++)
    padded[r] = tokens[n - 1];
  AmkStepStatus st = amk_engine_step_rows(prog->engine, padded, prog->rows, pos, diag);
  free(padded);
  return st;
}

AmkStepStatus run_prefill_chunk(RunPrefill *p, const int32_t *tokens, int64_t n, int64_t pos,
                                AmkDiagEngine *diag) {
  p->last_rows = n;
  if (n == 1) {
    /* One token is a decode step. */
    p->last = p->decode;
    return amk_engine_step(p->decode, tokens[0], pos, NULL, diag);
  }
  const PrefillProgram *prog = program_for(p, chunk_rows(p, n, pos), diag);
  if (!prog)
    return AMK_STEP_ERROR;
  p->last = prog->engine;
  if (!p->copy_kv)
    return step_program(prog, tokens, n, pos, diag);
  /* The rows before the chunk into the prefill layout: those decode steps
   * wrote since the last chunk (all of them after a rewind, which the
   * driver does not do today), then the chunk's rows out. */
  AmkEngine *owner = p->programs[0].engine;
  if (pos < p->synced)
    p->synced = 0;
  if (p->synced < pos &&
      !amk_engine_copy_kv_rows(p->from_decode, owner, p->decode, p->synced, pos, diag))
    return AMK_STEP_ERROR;
  p->synced = pos;
  AmkStepStatus st = step_program(prog, tokens, n, pos, diag);
  if (st != AMK_STEP_OK)
    return st;
  if (!amk_engine_copy_kv_rows(p->to_decode, p->decode, owner, pos, pos + n, diag))
    return AMK_STEP_ERROR;
  p->synced = pos + n;
  return AMK_STEP_OK;
}

AmkEngine *run_prefill_last_engine(const RunPrefill *p) { return p->last; }

const float *run_prefill_logits(const RunPrefill *p, size_t *rows, size_t *vocab) {
  const float *logits = amk_engine_logit_rows(p->last, rows, vocab);
  /* Every row's logits: the real rows' only. */
  if (*rows > 1 && *rows > (size_t)p->last_rows)
    *rows = (size_t)p->last_rows;
  return logits;
}
