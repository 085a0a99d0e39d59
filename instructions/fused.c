/* FUSED recipes: parsing and the structural check. A recipe is a list of
 * primitive steps reading task inputs and earlier scratch and writing
 * either a scratch slot or the task's output; the dispatcher (dispatch.c)
 * runs the steps, each through amk_inst_execute. docs/Instructions.md
 * defines the format.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inst_internal.h"

/* A scratch slot larger than this is a malformed recipe, not a request. */
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
                      const bool *slot_written, InstRecipeStep *step, char *err,
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
      step->arg_kind[a] = INST_ARG_INPUT;
    } else if (strcmp(key, "s") == 0) {
      if (k < 0 || k >= AMK_RECIPE_MAX_SCRATCH || !slot_written[k])
        return recipe_error(err, err_len,
                            "step %u: reads scratch %" PRId64
                            " before a step writes it",
                            index, k);
      step->arg_kind[a] = INST_ARG_SCRATCH;
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

static int parse_out(const AmkValue *v, uint32_t index, InstRecipeStep *step,
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
                              InstRecipeStep *step, char *err, size_t err_len) {
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

int inst_recipe_parse(const AmkValue *recipe, uint32_t n_inputs, InstRecipe *r,
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
    InstRecipeStep *step = &r->steps[i];
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
  InstRecipe *r = malloc(sizeof *r);
  if (!r)
    return AMK_INST_ERR_NOMEM;
  int rc = inst_recipe_parse(recipe, n_inputs, r, err, err_len);
  free(r);
  return rc;
}
