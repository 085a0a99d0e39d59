/* Every op's semantic bounds (passes/validate_bounds.c): for each op in
 * AMK_OPS, a one-task program whose params disagree with its buffers'
 * shapes. An op for which amk_validate_op_has_bounds says a bound exists
 * must draw an error that the same program without semantic bounds does
 * not; an op without bounds must draw none (so the answer is not just
 * "true" everywhere, and no rule passes silently). */
#include <stdio.h>
#include <string.h>

#include "amk/diag.h"
#include "amk/validate.h"
#include "unit.h"
#include "../../passes/validate_internal.h"

/* One task of `op`: inputs are read-only [1, 3 + i] buffers, the output an
 * activation [1, 3 + n_inputs] (numels that never match), every required
 * param 2 (0.5 for a float); so K, hidden, head_dim and pos contradict the
 * widths and lengths their bounds tie them to. */
static AmkModule *one_task(AmkOp op) {
  const AmkOpInfo *info = amk_op_info(op);
  uint32_t n_in = (uint32_t)info->min_inputs, n_out = (uint32_t)info->n_outputs;
  AmkModule *m = amk_module_new();
  for (uint32_t b = 0; b < n_in + n_out; b++) {
    AmkBuffer *buf = amk_module_add_buffer(m);
    buf->id = (int32_t)b;
    buf->name = "b";
    buf->kind = b < n_in ? AMK_KIND_WEIGHT : AMK_KIND_ACTIVATION;
    buf->rank = 2;
    buf->shape = amk_arena_alloc(&m->arena, 2 * sizeof(AmkValue));
    buf->shape[0] = amk_value_int(1);
    buf->shape[1] = amk_value_int(3 + b);
  }
  amk_module_add_counter(m)->id = 0;
  AmkTask *t = amk_module_add_task(m);
  t->id = 0;
  t->op = op;
  t->label = "t";
  t->out_counter = 0;
  t->n_inputs = n_in;
  t->n_outputs = n_out;
  t->inputs = amk_arena_alloc(&m->arena, (n_in + 1) * sizeof(int32_t));
  t->outputs = amk_arena_alloc(&m->arena, (n_out + 1) * sizeof(int32_t));
  for (uint32_t i = 0; i < n_in; i++)
    t->inputs[i] = (int32_t)i;
  for (uint32_t i = 0; i < n_out; i++)
    t->outputs[i] = (int32_t)(n_in + i);
  t->params = amk_arena_alloc(&m->arena, AMK_PARAM_COUNT * sizeof(AmkParam));
  for (int f = 0; f < AMK_PARAM_COUNT; f++)
    if (info->required_params & (1u << f)) {
      AmkParam *p = &t->params[t->n_params++];
      p->key = amk_param_name((AmkParamField)f);
      p->value = amk_param_type((AmkParamField)f) == 'f' ? amk_value_float(0.5)
                                                         : amk_value_int(2);
    }
  return m;
}

static int64_t errors_with(const AmkModule *m, bool semantic_bounds) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  AmkValidateOptions opts = amk_validate_default_options();
  opts.semantic_bounds = semantic_bounds;
  AmkValidateResult r;
  amk_validate_module(m, d, &opts, &r);
  amk_diag_free(d);
  return r.errors;
}

int main(void) {
  UnitCounts c = {0};
  int with_bounds = 0;
  for (int op = 0; op < AMK_OP_COUNT; op++) {
    AmkModule *m = one_task((AmkOp)op);
    int64_t off = errors_with(m, false), on = errors_with(m, true);
    bool has = amk_validate_op_has_bounds((AmkOp)op);
    with_bounds += has;
    if (has != (on > off))
      fprintf(stderr, "%s: amk_validate_op_has_bounds says %d, but the bounds added %lld "
                      "errors\n",
              amk_op_info((AmkOp)op)->json_name, has, (long long)(on - off));
    CHECK(&c, has == (on > off));
    amk_module_free(m);
  }
  /* Most ops have bounds; the exceptions are listed in validate_bounds.c. */
  CHECK(&c, with_bounds >= AMK_OP_COUNT - 5);
  CHECK(&c, !amk_validate_op_has_bounds(AMK_OP_NOP) &&
                amk_validate_op_has_bounds(AMK_OP_GEMV_TILE));
  return unit_finish("test_op_bounds", &c);
}
