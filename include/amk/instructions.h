/* CPU reference kernels for every AMK opcode, with the frozen numerics.
 *
 * The kernels work on plain host memory and know nothing of buffers ids,
 * counters or the scheduler, so the reference VM and the unit tests call
 * them directly. Every op computes in fp32 (fp32 accumulation, one fixed
 * summation order: ascending index) and casts to the output view's dtype
 * at the end; BF16/F16 inputs widen exactly. A kernel never trusts a shape:
 * every index is bounds-checked and a mismatch is an error with a message,
 * never a crash. docs/Instructions.md is the per-op reference.
 */
#ifndef AMK_INSTRUCTIONS_H
#define AMK_INSTRUCTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/ir.h"
#include "amk/params.h"

/* A dense, row-major tensor in host memory. numel is the product of the
 * dims; sub-byte dtypes (I4) are packed, two elements a byte. */
typedef struct {
  void *data;
  AmkDType dtype;
  uint32_t rank;
  int64_t shape[AMK_MAX_RANK];
  int64_t numel;
} AmkTensorView;

/* A view over `data` with the given dims (numel computed). Rank above
 * AMK_MAX_RANK or a negative dim gives numel -1, which every kernel rejects. */
AmkTensorView amk_tensor_view(void *data, AmkDType dtype, uint32_t rank,
                              const int64_t *shape);

/* The marshalled params (AmkInstParams) and their decoding live in the plan
 * layer: amk/params.h. */

/* What a task needs beyond its marshalled params. */
typedef struct {
  const AmkValue *recipe; /* FUSED: the task's "recipe" param */
  /* The decode step's position. When set, KV_APPEND and the rope_kv
   * pattern write this row instead of their `pos` param, and rope_kv and
   * attention_rope rotate at it (one compiled program serves every step). */
  bool has_position;
  int64_t position;
  /* ROPE: head_dim/2 precomputed inverse frequencies (e.g. Llama-3 scaled,
   * from amk_rope_inv_freq), used instead of theta^(-i/half); NULL for the
   * default. An optional third ROPE input does the same from a buffer. */
  const float *rope_inv_freq;
} AmkInstExtra;

/* Status codes of amk_inst_execute (0 is success). */
typedef enum {
  AMK_INST_OK = 0,
  AMK_INST_ERR_OPCODE, /* no such opcode */
  AMK_INST_ERR_ARITY,  /* wrong number of inputs or outputs */
  AMK_INST_ERR_PARAM,  /* a required param is missing or out of range */
  AMK_INST_ERR_DTYPE,  /* a dtype the op cannot read or write */
  AMK_INST_ERR_SHAPE,  /* shapes that do not fit together */
  AMK_INST_ERR_INDEX,  /* a data-dependent index (token, position) out of range */
  AMK_INST_ERR_RECIPE, /* a malformed FUSED recipe */
  AMK_INST_ERR_NOMEM,
} AmkInstStatus;

_Static_assert(AMK_INST_ERR_PARAM == AMK_PARAMS_ERR,
               "the params decoders and the kernels share the bad-param status");

/* Run one instruction. Outputs must already be allocated with the shapes
 * the program declares. Returns AMK_INST_OK, or a status with a message
 * "<op>: <reason>" in err (err may be NULL). `extra` may be NULL. */
int amk_inst_execute(AmkOp op, const AmkInstParams *p,
                     const AmkTensorView *inputs, uint32_t n_inputs,
                     AmkTensorView *outputs, uint32_t n_outputs,
                     const AmkInstExtra *extra, char *err, size_t err_len);

/* A cross-rank ALLREDUCE_SHARD (param group >= 2, amk/tp.h) once every
 * rank of the group has reached it: parts[r] is rank r's one input, placed
 * at n_off[r] of the output (0 for a plain all-reduce, whose parts are as
 * large as the output); the sum over ranks 0..n-1 in that order, in fp32
 * from zero, is stored to every rank's output outs[r]. Disjoint parts make
 * it an exact gather. AMK_INST_OK, or a status and the reason in err. */
int amk_inst_allreduce_ranks(const AmkTensorView *parts, const int64_t *n_off, uint32_t n,
                             AmkTensorView *outs, char *err, size_t err_len);

/* Structural check of a FUSED recipe for a task with n_inputs inputs (what
 * FUSED checks before running anything; for the fuse pass and validator). */
int amk_inst_recipe_check(const AmkValue *recipe, uint32_t n_inputs,
                          char *err, size_t err_len);

/* Most steps a recipe may have, and the scratch slots it may name. */
#define AMK_RECIPE_MAX_STEPS 32
#define AMK_RECIPE_MAX_SCRATCH 16

#endif
