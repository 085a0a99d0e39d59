/* One interface for the engines that run a plan.
 *
 * An engine runs an AmkPlan with an AmkWeights: the CPU reference VM
 * (amk_vm_engine(), amk/vm.h) and the CUDA megakernel (amk_cuda_engine(),
 * amk/backend.h). The driver picks one by its ops table and from then on
 * talks only to this interface. The functions here call through the table,
 * so the plan layer depends on no engine; optional hooks an engine lacks
 * answer "not available" (false, 0, NULL, or an error naming the engine).
 *
 * Several engines may run over one plan and one set of weights at once
 * (amk-run --check steps the GPU and the CPU VM side by side).
 */
#ifndef AMK_ENGINE_H
#define AMK_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/plan.h"
#include "amk/weights.h"

struct AmkTrace;

typedef struct {
  /* CPU: worker threads (0: $AMK_VM_THREADS, else one per online CPU; at
   * most 16; amk-run -t). */
  int threads;
  /* CUDA: the host watchdog per launch in ms (0: $AMK_CUDA_TIMEOUT_MS, else
   * 10000), threads per block (0: the program's), the NVRTC cubin cache,
   * device facts on stderr, and stamping every task of every launch. */
  double timeout_ms;
  int threads_per_block;
  bool use_cache;
  bool verbose;
  bool trace;
  /* A tensor-parallel group (amk_vm_group_engine): the plans and weights
   * of ranks 0..tp_size-1 (create's own are rank 0's). */
  const AmkPlan *const *tp_plans;
  const AmkWeights *const *tp_weights;
  uint32_t tp_size;
  /* Prefill: an engine of the same kind, over the decode program, whose
   * device copies this one uses instead of making its own: weights by
   * source (amk_weights_source_in), KV caches by name (the CUDA engine; the
   * CPU VM borrows through amk_weights_share and share_kv and ignores it).
   * It must outlive the new engine. amk_engine_create refuses one of
   * another kind and passes its engine-side object as share_self. */
  const struct AmkEngine *share_with;
  const void *share_self;
} AmkEngineOptions;

/* Every field at its default (use_cache on). */
AmkEngineOptions amk_engine_options_default(void);

typedef enum {
  AMK_STEP_OK = 0,
  AMK_STEP_ERROR = 1,   /* reported through diag */
  AMK_STEP_TIMEOUT = 2, /* the watchdog stopped the step (GPU) */
} AmkStepStatus;

/* What an engine implements. The first block is required; the rest may be
 * NULL. `self` is what create returned. */
/* Greedy decoding inside the engine (the `generate` hook): launch i feeds
 * feed[i] while i < n_feed, else the argmax of launch i - 1, at position
 * pos + i; on_token sees launch i's argmax (return false to stop). */
typedef struct {
  const int32_t *feed;
  int64_t n_feed; /* >= 1 */
  int64_t pos;
  int64_t n_steps;
  bool (*on_token)(void *ctx, int64_t step, int32_t token);
  void *ctx;
} AmkGenerate;

/* One strided piece of every row of a KV cache copied into another: row r
 * of `to_buffer` at byte r * to_pitch + to_offset takes `width` bytes from
 * row r of `from_buffer` at r * from_pitch + from_offset (buffers are plan
 * buffer indices of the two engines). */
typedef struct {
  uint32_t to_buffer, from_buffer;
  int64_t to_pitch, to_offset, from_pitch, from_offset, width;
} AmkKvRowCopy;

typedef struct {
  const char *name; /* "cpu", "cuda" */
  void *(*create)(const AmkPlan *plan, const AmkWeights *weights, const AmkEngineOptions *opt,
                  AmkDiagEngine *diag);
  void (*destroy)(void *self);
  /* One decode step: token at position pos. kernel_ms (NULL: not wanted)
   * receives the device time when the engine measures one. */
  AmkStepStatus (*step)(void *self, int32_t token, int64_t pos, float *kernel_ms,
                        AmkDiagEngine *diag);
  const float *(*logits)(const void *self, size_t *n);
  bool (*reset)(void *self, AmkDiagEngine *diag);

  bool measures_kernel_time;                /* step fills kernel_ms */
  const char *(*describe)(const void *self); /* a line about the device */
  double (*measure_read_bw)(void *self, size_t bytes, int reps, AmkDiagEngine *diag);
  void (*set_tracing)(void *self, bool on);
  bool (*trace)(void *self, struct AmkTrace *out, AmkDiagEngine *diag);
  /* Greedy decoding with no host round trip per token (the GPU); kernel_ms
   * receives the summed device time. */
  AmkStepStatus (*generate)(void *self, const AmkGenerate *g, double *kernel_ms,
                            AmkDiagEngine *diag);
  /* Prefill programs (plan->rows > 1): one step of n = plan->rows tokens
   * at positions pos..pos+n-1; every logits row of the last step; running
   * on the KV caches of another engine of the same kind (by name). */
  AmkStepStatus (*step_rows)(void *self, const int32_t *tokens, int64_t n, int64_t pos,
                             AmkDiagEngine *diag);
  const float *(*logit_rows)(const void *self, size_t *rows, size_t *vocab);
  bool (*share_kv)(void *self, const void *from, AmkDiagEngine *diag);
  /* The host bytes of KV_CACHE buffer b (NULL: none, or not on the host):
   * what amk_engine_copy_kv_rows reads and writes. */
  void *(*kv_data)(void *self, uint32_t b, size_t *nbytes);
  /* Engines that keep their KV caches off the host (kv_data NULL): copies
   * rows [row_begin, row_end) of each of n strided row pieces from an
   * engine of the same kind into self's caches, on the device; returns
   * once they are done. */
  bool (*copy_kv_rows)(void *self, const void *from, const AmkKvRowCopy *copies, uint32_t n,
                       int64_t row_begin, int64_t row_end, AmkDiagEngine *diag);
} AmkEngineOps;

typedef struct AmkEngine AmkEngine;

/* Creates an engine of the given kind over plan and weights (both must
 * outlive it). NULL after reporting. */
AmkEngine *amk_engine_create(const AmkEngineOps *ops, const AmkPlan *plan,
                             const AmkWeights *weights, const AmkEngineOptions *opt,
                             AmkDiagEngine *diag);
void amk_engine_free(AmkEngine *e);

const char *amk_engine_name(const AmkEngine *e);
const AmkPlan *amk_engine_plan(const AmkEngine *e);
AmkStepStatus amk_engine_step(AmkEngine *e, int32_t token, int64_t pos, float *kernel_ms,
                              AmkDiagEngine *diag);
/* The logits of the last step as fp32; *n receives the vocabulary size. */
const float *amk_engine_logits(const AmkEngine *e, size_t *n);
/* Clears the KV caches (a new sequence). */
bool amk_engine_reset(AmkEngine *e, AmkDiagEngine *diag);
/* The longest position + 1 a step may use, and the width of the logits. */
int64_t amk_engine_max_seq(const AmkEngine *e);
int64_t amk_engine_vocab(const AmkEngine *e);
/* WEIGHT bytes a token streams (the bench's GB/s numerator). */
int64_t amk_engine_weight_bytes(const AmkEngine *e);

/* Optional hooks. */
bool amk_engine_measures_kernel_time(const AmkEngine *e);
/* A line about the device, or the engine's name. */
const char *amk_engine_describe(const AmkEngine *e);
/* Read bandwidth in GB/s (<= 0: failed or not available). */
double amk_engine_measure_read_bw(AmkEngine *e, size_t bytes, int reps, AmkDiagEngine *diag);
/* Pauses/resumes per-task stamping of an engine created with `trace`. */
void amk_engine_set_tracing(AmkEngine *e, bool on);
/* The trace of the last step. False after reporting. */
bool amk_engine_trace(AmkEngine *e, struct AmkTrace *out, AmkDiagEngine *diag);

/* Prefill: whether the engine runs prefill programs (step_rows and
 * share_kv), one step of its plan's rows tokens, every logits row of the
 * last step (the last row alone when the program writes one), and binding
 * its KV caches to those of `from` (an engine of the same kind; from must
 * outlive e). Each is an error naming the engine where it lacks the hook. */
bool amk_engine_can_prefill(const AmkEngine *e);
AmkStepStatus amk_engine_step_rows(AmkEngine *e, const int32_t *tokens, int64_t n, int64_t pos,
                                   AmkDiagEngine *diag);
const float *amk_engine_logit_rows(const AmkEngine *e, size_t *rows, size_t *vocab);
bool amk_engine_share_kv(AmkEngine *e, const AmkEngine *from, AmkDiagEngine *diag);
/* The host bytes of KV_CACHE buffer b, or NULL (*nbytes 0) where the
 * engine keeps none (no kv_data hook) or b is no KV cache. */
void *amk_engine_kv_data(AmkEngine *e, uint32_t b, size_t *nbytes);
/* Whether `to` copies KV rows from `from` on the device (copy_kv_rows), and
 * doing so; false after reporting where it cannot. */
bool amk_engine_copies_kv_on_device(const AmkEngine *to, const AmkEngine *from);
bool amk_engine_copy_kv_device(AmkEngine *to, const AmkEngine *from, const AmkKvRowCopy *copies,
                               uint32_t n, int64_t row_begin, int64_t row_end,
                               AmkDiagEngine *diag);

/* KV rows across cache layouts (runtime/kv_layout.c). The unfused programs
 * (import, tile; every prefill program) keep per layer `P.kcache` and
 * `P.vcache` [max_seq, n_kv, head_dim]; fuse's rope_kv writes per-head
 * `P.kv_cache.hC` [max_seq, 2, head_dim] (plane 0 keys, 1 values) or one
 * combined `P.kv_cache` [max_seq, 2, n_kv * head_dim] (P the layer's
 * prefix, e.g. "L3."). A map pairs every head's key and value row of `to`
 * with the same layer, plane and head of `from`; NULL after reporting a
 * cache of another name, shape or dtype, or one `from` lacks. */
typedef struct AmkKvMap AmkKvMap;
AmkKvMap *amk_kv_map_new(const AmkPlan *to, const AmkPlan *from, AmkDiagEngine *diag);
void amk_kv_map_free(AmkKvMap *map);
/* Whether the two plans' KV caches are the same buffers by name, size and
 * dtype (then amk_engine_share_kv binds them, and nothing is copied). */
bool amk_kv_same_caches(const AmkPlan *a, const AmkPlan *b);
/* Copies rows [row_begin, row_end) of every KV cache of `from` into `to`
 * through the map (made for to's and from's plans, in that order): through
 * host bytes (kv_data), or on the device (copy_kv_rows, both engines of
 * one kind). False, after reporting, when neither is possible. */
bool amk_engine_copy_kv_rows(const AmkKvMap *map, AmkEngine *to, AmkEngine *from,
                             int64_t row_begin, int64_t row_end, AmkDiagEngine *diag);

/* Whether the engine decodes greedily by itself, and doing so. */
bool amk_engine_can_generate(const AmkEngine *e);
AmkStepStatus amk_engine_generate(AmkEngine *e, const AmkGenerate *g, double *kernel_ms,
                                  AmkDiagEngine *diag);

/* One step of --check: an engine's logits against the reference's. max_abs
 * is max |got - ref|, scale max |ref|; pass follows the rule for the
 * program's precision (docs/Backend.md). */
typedef struct {
  double max_abs, scale;
  int32_t ref_token, gpu_token;
  size_t ref_nonfinite, got_nonfinite; /* NaN or Inf logits on each side */
  bool pass; /* false too when the engine has more non-finite logits */
} AmkLogitCheck;

/* How many of n logits are NaN or Inf. */
size_t amk_count_nonfinite(const float *logits, size_t n);

AmkLogitCheck amk_check_logits(const float *ref, const float *got, size_t n,
                               bool low_precision);

#endif
