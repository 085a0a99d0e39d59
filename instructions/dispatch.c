/* amk_inst_execute: the opcode dispatch. It checks a call's arity and views
 * and runs the op's kernel from a table generated from AMK_OPS (an op with
 * no amk_kernel_<NAME> fails to link). FUSED lives here too: its steps are
 * instructions run through this same dispatcher, and keeping that loop
 * beside it lets the recursion stay inside one file (fused.c only parses).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "inst_internal.h"

/* ---- dispatch ------------------------------------------------------------------ */

static const AmkKernelFn kernel_for_op[AMK_OP_COUNT] = {
#define X(name, code, text, mi, ma, no, req) [AMK_OP_##name] = amk_kernel_##name,
    AMK_OPS(X)
#undef X
};

/* ROPE takes an optional third input (precomputed inverse frequencies, for
 * llama3-scaled rope) beyond the table's two; a GEMV_TILE's range depends on
 * its pattern (amk_op_max_inputs). */
static int max_inputs_of(AmkOp op, const AmkInstParams *p) {
  if (op == AMK_OP_ROPE)
    return 3;
  int64_t flags = amk_inst_param_has(p, AMK_PARAM_flags) ? (int64_t)p->flags.i : 0;
  return amk_op_max_inputs(op, flags);
}

static int check_view(const AmkInstCall *call, const AmkTensorView *v,
                      const char *role, uint32_t index) {
  if (v->rank > AMK_MAX_RANK)
    return inst_fail(call, AMK_INST_ERR_SHAPE, "%s %u has rank %u (max %d)",
                     role, index, v->rank, AMK_MAX_RANK);
  int64_t numel = 1;
  for (uint32_t d = 0; d < v->rank; d++) {
    if (v->shape[d] < 0 ||
        (v->shape[d] > 0 && numel > INT64_MAX / v->shape[d]))
      return inst_fail(call, AMK_INST_ERR_SHAPE, "%s %u has a bad dim %" PRId64,
                       role, index, v->shape[d]);
    numel *= v->shape[d];
  }
  if (numel != v->numel)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%s %u: numel %" PRId64 " is not the product of its dims "
                     "(%" PRId64 ")",
                     role, index, v->numel, numel);
  if ((unsigned)v->dtype >= AMK_DTYPE_COUNT)
    return inst_fail(call, AMK_INST_ERR_DTYPE, "%s %u has an unknown dtype",
                     role, index);
  if (numel > 0 && !v->data)
    return inst_fail(call, AMK_INST_ERR_SHAPE, "%s %u has no data", role,
                     index);
  return AMK_INST_OK;
}

int amk_inst_execute(AmkOp op, const AmkInstParams *p,
                     const AmkTensorView *inputs, uint32_t n_inputs,
                     AmkTensorView *outputs, uint32_t n_outputs,
                     const AmkInstExtra *extra, char *err, size_t err_len) {
  static const AmkInstParams no_params;
  static const AmkInstExtra no_extra;
  AmkInstCall call = {.op = op,
                      .p = p ? p : &no_params,
                      .in = inputs,
                      .n_in = n_inputs,
                      .out = outputs,
                      .n_out = n_outputs,
                      .extra = extra ? extra : &no_extra,
                      .err = err,
                      .err_len = err_len};
  if (err && err_len)
    err[0] = '\0';
  if ((unsigned)op >= AMK_OP_COUNT) {
    if (err && err_len)
      snprintf(err, err_len, "unknown opcode %d", (int)op);
    return AMK_INST_ERR_OPCODE;
  }
  const AmkOpInfo *info = amk_op_info(op);
  int max_in = max_inputs_of(op, call.p);
  if ((int)n_inputs < info->min_inputs ||
      (max_in >= 0 && (int)n_inputs > max_in))
    return inst_fail(&call, AMK_INST_ERR_ARITY,
                     "takes %d to %d inputs, got %u", info->min_inputs,
                     max_in, n_inputs);
  if ((int)n_outputs != info->n_outputs)
    return inst_fail(&call, AMK_INST_ERR_ARITY, "takes %d outputs, got %u",
                     info->n_outputs, n_outputs);
  if ((n_inputs && !inputs) || (n_outputs && !outputs))
    return inst_fail(&call, AMK_INST_ERR_ARITY, "missing input/output array");
  for (uint32_t i = 0; i < n_inputs; i++) {
    int rc = check_view(&call, &inputs[i], "input", i);
    if (rc)
      return rc;
  }
  for (uint32_t i = 0; i < n_outputs; i++) {
    int rc = check_view(&call, &outputs[i], "output", i);
    if (rc)
      return rc;
  }
  return kernel_for_op[op](&call);
}

/* ---- FUSED: a recipe of primitive steps over transient scratch -------------------- */

/* Each step is an ordinary instruction (run through amk_inst_execute, so
 * with every check of the unfused op). Scratch is zeroed, shaped and typed
 * as the step says, so a recipe gives exactly the bits of its unfused steps
 * when the scratch dtypes match the unfused intermediate buffers. */

/* A scratch slot larger than this is a malformed recipe, not a request. */
#define RECIPE_MAX_SCRATCH_BYTES ((int64_t)1 << 30)

/* Allocate a zeroed scratch tensor shaped and typed as the step says,
 * defaulting to its first argument's (f32 when it has none; the parser made
 * sure such a step gives out_shape). */
static int make_scratch(const AmkInstCall *call, uint32_t index,
                        const InstRecipeStep *step, const AmkTensorView *first_arg,
                        AmkTensorView *view) {
  const int64_t *shape = step->has_shape ? step->shape : first_arg->shape;
  uint32_t rank = step->has_shape ? step->rank : first_arg->rank;
  AmkDType dtype = step->has_dtype ? step->dtype
                   : first_arg     ? first_arg->dtype
                                   : AMK_DTYPE_F32;
  *view = amk_tensor_view(NULL, dtype, rank, shape);
  int64_t nbytes = view->numel < 0 ? -1 : inst_nbytes(view);
  if (nbytes < 0 || nbytes > RECIPE_MAX_SCRATCH_BYTES)
    return inst_fail(call, AMK_INST_ERR_RECIPE,
                     "step %u: scratch of that shape is too large", index);
  view->data = calloc((size_t)(nbytes ? nbytes : 1), 1);
  if (!view->data)
    return inst_fail(call, AMK_INST_ERR_NOMEM, "out of memory");
  return AMK_INST_OK;
}

static int run_recipe(const AmkInstCall *call, const InstRecipe *r,
                      AmkTensorView *scratch) {
  for (uint32_t i = 0; i < r->n_steps; i++) {
    const InstRecipeStep *step = &r->steps[i];
    AmkTensorView args[AMK_MAX_INPUTS];
    for (uint32_t a = 0; a < step->n_args; a++)
      args[a] = step->arg_kind[a] == INST_ARG_INPUT ? call->in[step->arg_index[a]]
                                               : scratch[step->arg_index[a]];
    AmkTensorView target;
    int rc;
    if (step->out_slot < 0)
      target = call->out[0];
    else if ((rc = make_scratch(call, i, step,
                                   step->n_args ? &args[0] : NULL, &target)))
      return rc;
    char detail[256];
    rc = amk_inst_execute(step->op, &step->params, args, step->n_args, &target,
                          1, call->extra, detail, sizeof detail);
    if (step->out_slot >= 0) {
      /* Replace the slot only now: the step may have read its old value. */
      if (rc) {
        free(target.data);
      } else {
        free(scratch[step->out_slot].data);
        scratch[step->out_slot] = target;
      }
    }
    if (rc)
      return inst_fail(call, rc, "step %u: %s", i, detail);
  }
  return AMK_INST_OK;
}

/* inputs: whatever the recipe names; one output, written by the steps
 * whose out is "final". The recipe comes in call->extra->recipe. */
int amk_kernel_FUSED(const AmkInstCall *call) {
  if (!call->extra->recipe)
    return inst_fail(call, AMK_INST_ERR_RECIPE, "no recipe given");
  InstRecipe *r = malloc(sizeof *r);
  AmkTensorView *scratch = calloc(AMK_RECIPE_MAX_SCRATCH, sizeof *scratch);
  int rc;
  if (!r || !scratch)
    rc = inst_fail(call, AMK_INST_ERR_NOMEM, "out of memory");
  else if (!(rc = inst_recipe_parse(call->extra->recipe, call->n_in, r, call->err,
                               call->err_len)))
    rc = run_recipe(call, r, scratch);
  if (scratch)
    for (int s = 0; s < AMK_RECIPE_MAX_SCRATCH; s++)
      free(scratch[s].data);
  free(scratch);
  free(r);
  return rc;
}
