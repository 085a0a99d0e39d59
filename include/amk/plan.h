/* The lowered execution plan: what both engines run.
 *
 * amk_plan_build turns a module into the one description of how it runs,
 * built once: per task (list position) its op, marshalled params, how the
 * params follow the decode position, its split-KV partition, its buffers,
 * counter and waits; per buffer its bytes and page; the IO buffers; the
 * derived tables (ROPE inverse frequencies, synthetic CONST contents); the
 * topological order and SM assignment the device queues are built from.
 * The CPU reference VM (refvm/) and the CUDA engine (backend/) read only the
 * plan and the weights (amk/weights.h), so they cannot lower a program
 * differently, and a program either engine would refuse is refused here,
 * once, with one message.
 *
 * The plan is read-only after building; engines read its fields directly.
 * The module must outlive it.
 */
#ifndef AMK_PLAN_H
#define AMK_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/abi.h"
#include "amk/diag.h"
#include "amk/ir.h"
#include "amk/params.h"

/* How a task's params follow the step's position (the ABI's AMK_FOLLOW_*). */
typedef enum {
  AMK_PLAN_FOLLOW_NONE = AMK_FOLLOW_NONE,
  AMK_PLAN_FOLLOW_KV_ROW = AMK_FOLLOW_KV_ROW,       /* KV_APPEND / rope_kv: row pos */
  AMK_PLAN_FOLLOW_WINDOW = AMK_FOLLOW_WINDOW,       /* attention over [0, pos] */
  AMK_PLAN_FOLLOW_PARTITION = AMK_FOLLOW_PARTITION, /* split-KV partial */
} AmkPlanFollow;

/* A byte range of one buffer. buffer is -1 for none. */
typedef struct {
  int32_t buffer;
  int64_t offset, nbytes;
} AmkPlanRange;

typedef struct {
  AmkOp op;
  AmkInstParams params;   /* as compiled (meta.pos), before following */
  const AmkValue *recipe; /* FUSED: the "recipe" param, else NULL */
  AmkPlanFollow follow;
  /* AMK_PLAN_FOLLOW_PARTITION: partition part_index of part_count (from the
   * ATTENTION_COMBINE or the combine_residual GEMV tiles reading the task's
   * output), or part_count 0 when no combine reads it and the task keeps its
   * compiled kv_start, spanning
   * `span` rows (to the next partial of the same cache, the last to the
   * cache's end). */
  int64_t part_index, part_count, span;
  /* A combine (ATTENTION_COMBINE, combine_residual) whose partials are all
   * written only by tasks following the position's partitions: partitions
   * the window does not reach are empty, and it may skip them. A task
   * following a partition: every combine reading its output skips it when
   * empty, so it need not write it then. */
  bool combine_follows;
  uint32_t n_inputs, n_outputs;
  const uint32_t *inputs, *outputs; /* buffer indices (list positions) */
  uint32_t counter;                 /* the counter index it increments */
  uint32_t wait_begin, wait_end;    /* its waits: [wait_begin, wait_end) of the plan's */
  int32_t sm;                       /* the IR's sm, -1 when unassigned */
  /* ROPE without a frequency input: head_dim/2 fp32 inverse frequencies
   * exactly as the kernels compute them (1 / powf(theta, i / half) with
   * theta in fp32 for default rope, the fp32 rounding of amk_rope_inv_freq
   * for llama3). NULL for every other task. */
  const float *rope_inv_freq;
  int32_t rope_half;
  /* The rows of its matrix a GEMV/GEMM tile streams (input 1, rows
   * [n_off, n_off + N_tile) of K elements, clipped to the buffer): what the
   * device may prefetch before the task's waits hold. buffer -1: none. */
  AmkPlanRange weight_read;
} AmkPlanTask;

/* A buffer's part in weight-only quantization (docs/Quantization.md). */
typedef enum {
  AMK_PLAN_QUANT_NONE = 0,
  AMK_PLAN_QUANT_WEIGHT, /* the packed weights (qW, input 1) of quantized tiles */
  AMK_PLAN_QUANT_SCALES, /* their fp scales (input 2) */
} AmkPlanQuantRole;

typedef struct {
  AmkPlanQuantRole role;
  int32_t partner; /* the scales of a WEIGHT, the weights of SCALES */
  int32_t qdtype;  /* AMK_QDTYPE_INT8 or AMK_QDTYPE_INT4 */
  int64_t group, cols; /* the tiles' group and K */
} AmkPlanQuant;

typedef struct {
  AmkBufferKind kind;
  AmkDType dtype;
  uint32_t rank;
  int64_t shape[AMK_MAX_RANK];
  int64_t numel, nbytes;
  int32_t page; /* the page (index into page_bytes) it shares, or -1 */
  /* A synthetic CONST (source "amk.…"): its contents in its dtype, computed
   * at build time (nbytes bytes). NULL for every other buffer. */
  const void *synthetic;
  /* What the quantized GEMV/GEMM tiles reading it make of it; every tile
   * agrees (the plan refuses a program whose tiles read one weight with
   * different formats, groups or scales, or read it otherwise too), so the
   * loader can quantize a checkpoint tensor into it. */
  AmkPlanQuant quant;
  /* Written by accumulating tiles (mlp or attention_o, docs/Fusion.md),
   * which add to it: an f32 buffer on a page of its own that every engine
   * zeroes before each step. */
  bool accumulate;
} AmkPlanBuffer;

typedef struct AmkPlan {
  const AmkModule *m;
  uint32_t n_tasks, n_buffers, n_counters, n_pages;
  AmkPlanTask *tasks;
  AmkPlanBuffer *buffers;
  int64_t *page_bytes;
  /* Waits in CSR form: task t waits on wait_counter[k] >= wait_threshold[k]
   * for k in [tasks[t].wait_begin, tasks[t].wait_end). */
  uint32_t n_waits;
  uint32_t *wait_counter, *wait_threshold;
  /* A global topological order (the task list when it is one, else Kahn's
   * over counters). has_order is false when the counters admit none; the
   * device queues then cannot be built (amk_plan_queues reports it). */
  bool has_order;
  uint32_t *order;
  /* The IR's SM assignment: sm_count = the largest sm + 1 when every task
   * has one, else 0 (unassigned: the engine spreads the tasks). */
  int32_t sm_count;
  /* IO: the IO_INPUT named token_id, the one named pos (-1: none) and the
   * first IO_OUTPUT (the logits, f32/bf16/f16). */
  int32_t token_buffer, pos_buffer, logits_buffer;
  /* KV cache rows (INT64_MAX without a cache) and the width of the logits. */
  int64_t max_seq, vocab;
  /* Tokens a step feeds (token_id's elements: 1 for decode, the chunk's
   * rows for a prefill program) and the logits rows it writes (1, the last
   * row's, or rows: the IO_OUTPUT is [rows, vocab]). */
  int64_t rows, logit_rows;
  /* A bf16/f16 WEIGHT, ACTIVATION or IO_OUTPUT buffer (the --check rule). */
  bool low_precision;
  /* WEIGHT bytes a token streams (amk_module_streamed_weight_bytes). */
  int64_t weight_bytes;
} AmkPlan;

typedef struct {
  /* The caller already ran amk_validate_module on this module and it
   * passed: skip the validator. The structural checks the plan needs to be
   * built (buffers, pages, IO, split-KV partitions, params) still run. */
  bool already_validated;
} AmkPlanOptions;

/* Builds the plan. Runs the validator first (unless opt says the caller did)
 * and refuses a program it rejects. NULL after reporting on error. opt may
 * be NULL (validate). */
AmkPlan *amk_plan_build(const AmkModule *m, const AmkPlanOptions *opt, AmkDiagEngine *diag);
void amk_plan_free(AmkPlan *plan);

/* The device queues for n_queues blocks, from the order and the SM
 * assignment: a task runs on queue sm % n_queues when every task has an sm,
 * else the k-th task of the order on queue k % n_queues; each queue holds
 * its tasks in topological order. queue_of has n_tasks entries, offsets
 * n_queues + 1 and queue n_tasks (block b runs queue[offsets[b] ..
 * offsets[b + 1])). False after reporting when the plan has no order. */
bool amk_plan_queues(const AmkPlan *plan, int32_t n_queues, int32_t *queue_of,
                     int32_t *offsets, int32_t *queue, AmkDiagEngine *diag);

/* The params task t runs with at position pos: the compiled params moved
 * to the step (KV row, attention window, split-KV partition). */
AmkInstParams amk_plan_params_at(const AmkPlan *plan, uint32_t t, int64_t pos);

#endif
