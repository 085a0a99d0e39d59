/* The CPU reference VM: the numerical oracle.
 *
 * It runs a plan (amk/plan.h) by counter-driven scheduling (a task fires
 * once every wait is satisfied; finishing increments its counter) with the
 * CPU kernels of instructions/. One compiled program serves every position:
 * each step sets the IO inputs (`token_id`, `pos`) and moves the
 * position-dependent params to the step (amk_plan_params_at). KV caches
 * persist across steps. It is one of the engines of amk/engine.h.
 */
#ifndef AMK_VM_H
#define AMK_VM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/engine.h"
#include "amk/plan.h"
#include "amk/weights.h"

typedef struct AmkVm AmkVm;

/* Allocates activations (sharing memory as the page table says), KV caches
 * and IO buffers, and reads WEIGHT and CONST buffers in place from
 * `weights`. threads: workers firing ready tasks in programs of 256 tasks or
 * more (0: $AMK_VM_THREADS, a positive number, else one per online CPU; at
 * most 16). plan and weights must outlive the VM. NULL after reporting on
 * error, a bad $AMK_VM_THREADS included. */
AmkVm *amk_vm_create(const AmkPlan *plan, const AmkWeights *weights, int threads,
                     AmkDiagEngine *diag);
void amk_vm_free(AmkVm *vm);

/* One decode step: feed `token` at position `pos`. Returns false after
 * reporting (token outside the vocabulary, pos beyond the KV cache, a
 * kernel error, a stuck schedule). */
bool amk_vm_step(AmkVm *vm, int32_t token, int64_t pos, AmkDiagEngine *diag);

/* One step of a prefill program: its plan->rows tokens at positions
 * pos..pos+n-1 (n must be plan->rows). Same failures as amk_vm_step. */
bool amk_vm_step_rows(AmkVm *vm, const int32_t *tokens, int64_t n, int64_t pos,
                      AmkDiagEngine *diag);

/* The IO_OUTPUT logits of the last step's last row as fp32; *n receives the
 * count. */
const float *amk_vm_logits(const AmkVm *vm, size_t *n);
/* Every logits row of the last step (plan->logit_rows of them). */
const float *amk_vm_logit_rows(const AmkVm *vm, size_t *rows, size_t *vocab);

/* Binds every KV cache of vm to the memory of `from`'s cache of the same
 * name (same size and dtype, else an error): a prefill program's VM and
 * the decode program's then run on one cache. `from` must outlive vm. */
bool amk_vm_share_kv(AmkVm *vm, const AmkVm *from, AmkDiagEngine *diag);
/* The bytes of KV_CACHE buffer b (its own or the ones it shares), or NULL
 * (*nbytes 0) when b is no KV cache. */
void *amk_vm_kv_data(AmkVm *vm, uint32_t b, size_t *nbytes);

/* Clears the KV caches (a new sequence). */
void amk_vm_reset(AmkVm *vm);

/* A tensor-parallel group: the n rank programs of one model (the shard
 * pass's, plans[r] rank r's, each with its weights) run together in one
 * process, deterministically: each rank fires its ready tasks in order
 * until it reaches a cross-rank all-reduce; once all have, the parts are
 * summed in rank order and every rank goes on. The logits are rank 0's.
 * A plan with cross-rank all-reduces runs only here (amk_vm_create
 * refuses it). n = 1 runs one ordinary program. NULL after reporting. */
typedef struct AmkVmGroup AmkVmGroup;
AmkVmGroup *amk_vm_group_create(const AmkPlan *const *plans, const AmkWeights *const *weights,
                                uint32_t n, AmkDiagEngine *diag);
void amk_vm_group_free(AmkVmGroup *g);
bool amk_vm_group_step(AmkVmGroup *g, int32_t token, int64_t pos, AmkDiagEngine *diag);
const float *amk_vm_group_logits(const AmkVmGroup *g, size_t *n);
void amk_vm_group_reset(AmkVmGroup *g);

/* The group as an engine: create's plan and weights are rank 0's, and
 * AmkEngineOptions.tp_plans / tp_weights hold all n ranks' (amk-run
 * --tp N). */
const AmkEngineOps *amk_vm_group_engine(void);

/* The VM as an engine (amk_engine_create). */
const AmkEngineOps *amk_vm_engine(void);

#endif
