/* Marshalled task params: the host twin of the ABI's amk_params_t.
 *
 * One 4-byte slot per AMK_PARAMS field (tables.h), read through .i for an
 * 'i' field and .f for an 'f' field, plus a mask of the fields given. The
 * plan layer (runtime/params.c) decodes every task's params once; the CPU
 * kernels, the CUDA codegen and the device tables all read this form, so
 * the two engines cannot marshal a value differently.
 */
#ifndef AMK_PARAMS_H
#define AMK_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/ir.h"

typedef union {
  int32_t i;
  float f;
} AmkInstParamSlot;

typedef struct {
#define X(name, type) AmkInstParamSlot name;
  AMK_PARAMS(X)
#undef X
  uint32_t present; /* AMK_PARAM_BIT(name) for each field given */
} AmkInstParams;

static inline bool amk_inst_param_has(const AmkInstParams *p,
                                      AmkParamField field) {
  return (p->present >> field) & 1u;
}

/* The status the decoders return for a bad param (the kernels' status code
 * AMK_INST_ERR_PARAM, amk/instructions.h, has the same value); 0 is success. */
#define AMK_PARAMS_ERR 3

/* The slot of a field (NULL for a value outside the table). */
AmkInstParamSlot *amk_inst_param_slot(AmkInstParams *p, AmkParamField field);

/* Set one field by name. A key that is not a marshalled field (e.g.
 * "recipe") is ignored and returns 0. An 'i' field takes an INT (or an
 * integral FLOAT) in int32 range; an 'f' field takes an INT or a FLOAT.
 * AMK_PARAMS_ERR with the reason in err otherwise. */
int amk_inst_params_set(AmkInstParams *p, const char *key, const AmkValue *v,
                        char *err, size_t err_len);
/* Decode a task's params (zeroing *out first). */
int amk_inst_params_from_task(const AmkTask *t, AmkInstParams *out, char *err,
                              size_t err_len);
/* Decode a params OBJECT (a FUSED recipe step's "params"). */
int amk_inst_params_from_object(const AmkValue *obj, AmkInstParams *out,
                                char *err, size_t err_len);

#endif
