/* FUSED: run a recipe of primitive steps over transient scratch.
 *
 * Each step is an ordinary instruction (run through amk_inst_execute, so
 * with every check of the unfused op) reading task inputs and earlier
 * scratch and writing either a scratch slot or the task's output. Scratch
 * is zeroed, shaped and typed as the step says, so a recipe gives exactly
 * the bits of its unfused steps when the scratch dtypes match the unfused
 * intermediate buffers. docs/Instructions.md defines the format.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inst_internal.h"

/* A scratch slot larger than this is a malformed recipe, not a request. */
#define RECIPE_MAX_SCRATCH_BYTES ((int64_t)1 << 30)

typedef enum { ARG_INPUT, ARG_SCRATCH } ArgKind;

typedef struct {
  AmkOp op;
  AmkInstParams params;
  uint32_t n_args;
  ArgKind arg_kind[AMK_MAX_INPUTS];
  int32_t arg_index[AMK_MAX_INPUTS];
  int32_t out_slot; /* -1: the task's output */
  bool has_shape, has_dtype;
  uint32_t rank;
  int64_t shape[AMK_MAX_RANK];
  AmkDType dtype;
} RecipeStep;

typedef struct {
  uint32_t n_steps;
  RecipeStep steps[AMK_RECIPE_MAX_STEPS];
} Recipe;

static int recipe_error(char *err, size_t err_len, const char *fmt, ...)
    AMK_PRINTF(3, 4);
static int recipe_error(char *err, size_t err_len, const char *fmt, ...) {
  if (err && err_len) {
    int used = snprintf(err, err_len, "fused: malformed recipe: ");
    va_list ap;
    va_start(ap, fmt);
    if (used >= 0 && (size_t)used < err_len)
      vsnprintf(err + used, err_len - (size_t)used, fmt, ap);
    va_end(ap);
  }
  return AMK_INST_ERR_RECIPE;
}

/* "f32"/"F32" as in the IR, or the reference's torch names. */
static int dtype_from_recipe_name(const char *name) {
  static const struct {
    const char *torch_name;
    AmkDType dtype;
  } torch_names[] = {{"float32", AMK_DTYPE_F32}, {"float16", AMK_DTYPE_F16},
                     {"bfloat16", AMK_DTYPE_BF16}, {"int8", AMK_DTYPE_I8},
                     {"int32", AMK_DTYPE_I32}};
  int d = amk_dtype_from_text_name(name);
  if (d < 0)
    d = amk_dtype_from_json_name(name);
  for (size_t i = 0; d < 0 && i < sizeof torch_names / sizeof torch_names[0];
       i++)
    if (strcmp(name, torch_names[i].torch_name) == 0)
      d = (int)torch_names[i].dtype;
  return d;
}

static int parse_op(const AmkValue *v, uint32_t index, AmkOp *op, char *err,
                    size_t err_len) {
  int code = -1;
  int64_t i;
  if (v && v->kind == AMK_VALUE_STRING) {
    code = amk_op_from_text_name(v->as.s);
    if (code < 0)
      code = amk_op_from_json_name(v->as.s);
  } else if (amk_value_as_int(v, &i) && i >= 0 && i < AMK_OP_COUNT) {
    code = (int)i;
  }
  if (code < 0)
    return recipe_error(err, err_len, "step %u: unknown or missing op", index);
  if (code == AMK_OP_FUSED)
    return recipe_error(err, err_len, "step %u: nested fused is not allowed",
                        index);
  if (amk_op_info((AmkOp)code)->n_outputs != 1)
    return recipe_error(err, err_len, "step %u: %s writes no output", index,
                        amk_op_info((AmkOp)code)->text_name);
  *op = (AmkOp)code;
  return AMK_INST_OK;
}

static int parse_args(const AmkValue *args, uint32_t index, uint32_t n_inputs,
                      const bool *slot_written, RecipeStep *step, char *err,
                      size_t err_len) {
  step->n_args = 0;
  if (!args || args->kind == AMK_VALUE_NULL)
    return AMK_INST_OK;
  if (args->kind != AMK_VALUE_LIST)
    return recipe_error(err, err_len, "step %u: args must be a list", index);
  if (args->count > AMK_MAX_INPUTS)
    return recipe_error(err, err_len, "step %u: %u args (max %d)", index,
                        args->count, AMK_MAX_INPUTS);
  for (uint32_t a = 0; a < args->count; a++) {
    const AmkValue *ref = &args->as.items[a];
    int64_t k;
    if (ref->kind != AMK_VALUE_OBJECT || ref->count != 1 ||
        !amk_value_as_int(&ref->as.members[0].value, &k))
      return recipe_error(err, err_len,
                          "step %u: arg %u must be {\"in\": k} or {\"s\": j}",
                          index, a);
    const char *key = ref->as.members[0].key;
    if (strcmp(key, "in") == 0) {
      if (k < 0 || k >= n_inputs)
        return recipe_error(err, err_len,
                            "step %u: input %" PRId64 " is outside [0, %u)",
                            index, k, n_inputs);
      step->arg_kind[a] = ARG_INPUT;
    } else if (strcmp(key, "s") == 0) {
      if (k < 0 || k >= AMK_RECIPE_MAX_SCRATCH || !slot_written[k])
        return recipe_error(err, err_len,
                            "step %u: reads scratch %" PRId64
                            " before a step writes it",
                            index, k);
      step->arg_kind[a] = ARG_SCRATCH;
    } else {
      return recipe_error(err, err_len,
                          "step %u: arg %u must be {\"in\": k} or {\"s\": j}",
                          index, a);
    }
    step->arg_index[a] = (int32_t)k;
    step->n_args++;
  }
  return AMK_INST_OK;
}

static int parse_out(const AmkValue *v, uint32_t index, RecipeStep *step,
                     char *err, size_t err_len) {
  int64_t slot;
  if (v && v->kind == AMK_VALUE_STRING && strcmp(v->as.s, "final") == 0) {
    step->out_slot = -1;
  } else if (amk_value_as_int(v, &slot) && slot == -1) {
    step->out_slot = -1; /* the reference's alias for "final" */
  } else if (amk_value_as_int(v, &slot) && slot >= 0 &&
             slot < AMK_RECIPE_MAX_SCRATCH) {
    step->out_slot = (int32_t)slot;
  } else {
    return recipe_error(err, err_len,
                        "step %u: out must be \"final\" or a scratch slot in "
                        "[0, %d)",
                        index, AMK_RECIPE_MAX_SCRATCH);
  }
  return AMK_INST_OK;
}

static int parse_scratch_type(const AmkValue *step_v, uint32_t index,
                              RecipeStep *step, char *err, size_t err_len) {
  const AmkValue *shape = amk_object_get(step_v, "out_shape");
  const AmkValue *dtype = amk_object_get(step_v, "out_dtype");
  step->has_shape = shape && shape->kind != AMK_VALUE_NULL;
  step->has_dtype = dtype && dtype->kind != AMK_VALUE_NULL;
  if (step->has_shape) {
    if (shape->kind != AMK_VALUE_LIST || shape->count > AMK_MAX_RANK)
      return recipe_error(err, err_len,
                          "step %u: out_shape must be a list of at most %d dims",
                          index, AMK_MAX_RANK);
    step->rank = shape->count;
    for (uint32_t d = 0; d < shape->count; d++)
      if (!amk_value_as_int(&shape->as.items[d], &step->shape[d]) ||
          step->shape[d] < 0)
        return recipe_error(err, err_len,
                            "step %u: out_shape dim %u must be a non-negative "
                            "integer",
                            index, d);
  }
  if (step->has_dtype) {
    int d = dtype->kind == AMK_VALUE_STRING ? dtype_from_recipe_name(dtype->as.s)
                                            : -1;
    if (d < 0)
      return recipe_error(err, err_len, "step %u: unknown out_dtype", index);
    step->dtype = (AmkDType)d;
  }
  if (step->out_slot >= 0 && step->n_args == 0 && !step->has_shape)
    return recipe_error(err, err_len,
                        "step %u: a scratch output with no args needs "
                        "out_shape",
                        index);
  return AMK_INST_OK;
}

static int parse_recipe(const AmkValue *recipe, uint32_t n_inputs, Recipe *r,
                        char *err, size_t err_len) {
  const AmkValue *steps = amk_object_get(recipe, "steps");
  if (!steps || steps->kind != AMK_VALUE_LIST || steps->count == 0)
    return recipe_error(err, err_len,
                        "expected {\"steps\": [...]} with at least one step");
  if (steps->count > AMK_RECIPE_MAX_STEPS)
    return recipe_error(err, err_len, "%u steps (max %d)", steps->count,
                        AMK_RECIPE_MAX_STEPS);
  bool slot_written[AMK_RECIPE_MAX_SCRATCH] = {false};
  bool wrote_final = false;
  char detail[200];
  r->n_steps = steps->count;
  for (uint32_t i = 0; i < steps->count; i++) {
    const AmkValue *sv = &steps->as.items[i];
    RecipeStep *step = &r->steps[i];
    memset(step, 0, sizeof *step);
    int rc;
    if (sv->kind != AMK_VALUE_OBJECT)
      return recipe_error(err, err_len, "step %u must be an object", i);
    if ((rc = parse_op(amk_object_get(sv, "op"), i, &step->op, err, err_len)) ||
        (rc = parse_args(amk_object_get(sv, "args"), i, n_inputs, slot_written,
                         step, err, err_len)) ||
        (rc = parse_out(amk_object_get(sv, "out"), i, step, err, err_len)) ||
        (rc = parse_scratch_type(sv, i, step, err, err_len)))
      return rc;
    if (amk_inst_params_from_object(amk_object_get(sv, "params"),
                                    &step->params, detail, sizeof detail))
      return recipe_error(err, err_len, "step %u: %s", i, detail);
    if (step->out_slot < 0)
      wrote_final = true;
    else
      slot_written[step->out_slot] = true;
  }
  if (!wrote_final)
    return recipe_error(err, err_len, "no step writes \"final\"");
  return AMK_INST_OK;
}

int amk_inst_recipe_check(const AmkValue *recipe, uint32_t n_inputs,
                          char *err, size_t err_len) {
  Recipe *r = malloc(sizeof *r);
  if (!r)
    return AMK_INST_ERR_NOMEM;
  int rc = parse_recipe(recipe, n_inputs, r, err, err_len);
  free(r);
  return rc;
}

/* Allocate a zeroed scratch tensor shaped and typed as the step says,
 * defaulting to its first argument's (f32 when it has none; the parser made
 * sure such a step gives out_shape). */
static int make_scratch(const AmkInstCall *call, uint32_t index,
                        const RecipeStep *step, const AmkTensorView *first_arg,
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

static int run_recipe(const AmkInstCall *call, const Recipe *r,
                      AmkTensorView *scratch) {
  for (uint32_t i = 0; i < r->n_steps; i++) {
    const RecipeStep *step = &r->steps[i];
    AmkTensorView args[AMK_MAX_INPUTS];
    for (uint32_t a = 0; a < step->n_args; a++)
      args[a] = step->arg_kind[a] == ARG_INPUT ? call->in[step->arg_index[a]]
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
  Recipe *r = malloc(sizeof *r);
  AmkTensorView *scratch = calloc(AMK_RECIPE_MAX_SCRATCH, sizeof *scratch);
  int rc;
  if (!r || !scratch)
    rc = inst_fail(call, AMK_INST_ERR_NOMEM, "out of memory");
  else if (!(rc = parse_recipe(call->extra->recipe, call->n_in, r, call->err,
                               call->err_len)))
    rc = run_recipe(call, r, scratch);
  if (scratch)
    for (int s = 0; s < AMK_RECIPE_MAX_SCRATCH; s++)
      free(scratch[s].data);
  free(scratch);
  free(r);
  return rc;
}
