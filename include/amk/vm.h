/* The CPU reference VM: the numerical oracle.
 *
 * It executes a validated program by counter-driven scheduling (a task fires
 * once every wait is satisfied; finishing increments its counter) with the
 * CPU kernels of instructions/. One compiled program serves every position:
 * each step sets the IO inputs (`token_id`, `pos`) and derives the
 * position-dependent params (KV_APPEND row, attention windows) from the
 * step's position. KV caches persist across steps.
 */
#ifndef AMK_VM_H
#define AMK_VM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/ir.h"

typedef struct AmkVm AmkVm;

/* Validates the program (refusing it when `validate` rejects it), binds its
 * WEIGHT and CONST buffers from the safetensors checkpoint in `weights_dir`
 * (NULL: the module's model folder), converting to each buffer's dtype, and
 * allocates activations (sharing memory as the page table says), KV caches
 * and IO buffers. `m` must outlive the VM. NULL after reporting on error. */
AmkVm *amk_vm_create(const AmkModule *m, const char *weights_dir,
                     AmkDiagEngine *diag);

/* As amk_vm_create, with seeded random weights instead of a checkpoint
 * (uniform in [-scale, scale], norms around 1), for runs at real shapes
 * without a checkpoint. */
AmkVm *amk_vm_create_random(const AmkModule *m, uint64_t seed,
                            AmkDiagEngine *diag);

void amk_vm_free(AmkVm *vm);

/* One decode step: feed `token` at position `pos`. Returns false after
 * reporting (token outside the vocabulary, pos beyond the KV cache, a
 * kernel error, a stuck schedule). */
bool amk_vm_step(AmkVm *vm, int32_t token, int64_t pos, AmkDiagEngine *diag);

/* The IO_OUTPUT logits of the last step as fp32; *n receives the count. */
const float *amk_vm_logits(const AmkVm *vm, size_t *n);

/* KV cache rows (the longest position + 1 a step may use), and the
 * vocabulary size (the width of the logits). */
int64_t amk_vm_max_seq(const AmkVm *vm);
int64_t amk_vm_vocab(const AmkVm *vm);

/* Clears the KV caches (a new sequence). */
void amk_vm_reset(AmkVm *vm);

#endif
