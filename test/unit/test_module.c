/* The module API: arena, record arrays, id lookups, params and sizes. */
#include <string.h>

#include "amk/ir.h"
#include "unit.h"

int main(void) {
  UnitCounts c = {0};
  AmkModule *m = amk_module_new();
  CHECK_STR(&c, m->ir_version, "0.2.0");
  CHECK_STR(&c, m->abi_version, "0.2");
  CHECK(&c, m->meta.kind == AMK_VALUE_OBJECT && m->meta.count == 0);

  /* Appending many records keeps ids = positions and earlier data intact. */
  for (int i = 0; i < 1000; i++) {
    AmkBuffer *b = amk_module_add_buffer(m);
    b->name = amk_arena_strdup(&m->arena, "x");
    b->dtype = AMK_DTYPE_BF16;
    b->rank = 2;
    b->shape = amk_arena_alloc(&m->arena, 2 * sizeof *b->shape);
    b->shape[0] = amk_value_int(3);
    b->shape[1] = amk_value_int(i + 1);
    b->kind = i % 2 ? AMK_KIND_WEIGHT : AMK_KIND_ACTIVATION;
  }
  CHECK(&c, m->n_buffers == 1000);
  CHECK(&c, m->buffers[999].id == 999 && amk_module_buffer(m, 999) == &m->buffers[999]);
  CHECK(&c, amk_module_buffer(m, 1000) == NULL && amk_module_buffer(m, -1) == NULL);

  int64_t n = 0;
  CHECK(&c, amk_buffer_numel(&m->buffers[4], &n) && n == 15);
  CHECK(&c, amk_buffer_nbytes(&m->buffers[4], &n) && n == 30);
  /* Weight bytes: odd-indexed buffers, 3 * (i+1) bf16 elements each. */
  int64_t want = 0;
  for (int i = 1; i < 1000; i += 2)
    want += 3 * (i + 1) * 2;
  CHECK(&c, amk_module_weight_bytes(m) == want);

  /* A float dim is not an integer shape. */
  m->buffers[0].shape[1] = amk_value_float(2.0);
  CHECK(&c, !amk_buffer_numel(&m->buffers[0], &n));

  /* Ids that are not positions are found by the slow path. */
  AmkCounter *k = amk_module_add_counter(m);
  k->id = 42;
  CHECK(&c, amk_module_counter(m, 42) == &m->counters[0]);
  CHECK(&c, amk_module_counter(m, 0) == NULL);
  CHECK_STR(&c, m->counters[0].note, "");

  /* Params: insertion order, replacement in place, typed access. */
  AmkTask *t = amk_module_add_task(m);
  amk_task_set_param(m, t, "K", amk_value_int(64));
  amk_task_set_param(m, t, "eps", amk_value_float(1e-5));
  amk_task_set_param(m, t, "K", amk_value_int(128));
  CHECK(&c, t->n_params == 2);
  CHECK_STR(&c, t->params[0].key, "K");
  int64_t k_val = 0;
  double eps = 0;
  CHECK(&c, amk_task_param_int(t, "K", &k_val) && k_val == 128);
  CHECK(&c, amk_task_param_real(t, "eps", &eps) && eps == 1e-5);
  CHECK(&c, !amk_task_param_int(t, "eps", &k_val)); /* a float is not an int */
  CHECK(&c, amk_task_param_real(t, "K", &eps) && eps == 128.0); /* an int is real */
  CHECK(&c, amk_task_param(t, "N") == NULL);
  CHECK_STR(&c, t->label, "");

  /* Arena: large and small allocations are zeroed and aligned. */
  unsigned char *big = amk_arena_alloc(&m->arena, 3u << 20);
  CHECK(&c, big[0] == 0 && big[(3u << 20) - 1] == 0 && ((uintptr_t)big & 15) == 0);
  char *s = amk_arena_strndup(&m->arena, "abcdef", 3);
  CHECK_STR(&c, s, "abc");
  amk_module_free(m);

  /* Streamed weight bytes: an embedding table read only by EMBED counts one
   * row per read; the same table read by a GEMV (a tied lm_head) counts in
   * full, once. */
  AmkModule *w = amk_module_new();
  for (int i = 0; i < 2; i++) {
    AmkBuffer *b = amk_module_add_buffer(w);
    b->name = i ? "head" : "table";
    b->kind = AMK_KIND_WEIGHT;
    b->dtype = AMK_DTYPE_BF16;
    b->rank = 2;
    b->shape = amk_arena_alloc(&w->arena, 2 * sizeof *b->shape);
    b->shape[0] = amk_value_int(100);
    b->shape[1] = amk_value_int(8);
  }
  AmkTask *embed = amk_module_add_task(w);
  embed->op = AMK_OP_EMBED;
  embed->n_inputs = 2;
  embed->inputs = amk_arena_alloc(&w->arena, 2 * sizeof(int32_t));
  embed->inputs[0] = 1; /* (any buffer as the ids) */
  embed->inputs[1] = 0;
  CHECK(&c, amk_module_weight_bytes(w) == 2 * 100 * 8 * 2);
  /* head: read as the ids input, so in full; table: one 8-element row. */
  CHECK(&c, amk_module_streamed_weight_bytes(w) == 100 * 8 * 2 + 8 * 2);
  AmkTask *gemv = amk_module_add_task(w);
  gemv->op = AMK_OP_GEMV_TILE;
  gemv->n_inputs = 2;
  gemv->inputs = amk_arena_alloc(&w->arena, 2 * sizeof(int32_t));
  gemv->inputs[0] = 1;
  gemv->inputs[1] = 0;
  CHECK(&c, amk_module_streamed_weight_bytes(w) == 2 * 100 * 8 * 2);
  amk_module_free(w);
  return unit_finish("test_module", &c);
}
