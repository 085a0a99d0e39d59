/* Helpers for code that builds a module in memory (include/amk/builder.h). */
#include "amk/builder.h"

#include <stdarg.h>
#include <stdio.h>

AmkConfig *amk_config_new_default(AmkModule *m) {
  AmkConfig *c = amk_arena_alloc(&m->arena, sizeof *c);
  c->tiling.kind = AMK_VALUE_OBJECT;
  c->fusion_grouping.kind = AMK_VALUE_LIST;
  c->sm_assignment = AMK_SM_LOAD_BALANCE;
  c->pipelining_depth = 2;
  c->page_allocation = AMK_PAGES_GRAPH_COLOR;
  c->threads_per_block = 256;
  c->smem_bytes_per_block = 0;
  return c;
}

const char *amk_arena_printf(AmkArena *a, const char *format, ...) {
  char text[256];
  va_list ap;
  va_start(ap, format);
  vsnprintf(text, sizeof text, format, ap);
  va_end(ap);
  return amk_arena_strdup(a, text);
}

int32_t amk_module_add_hbm_buffer(AmkModule *m, const char *name,
                                  AmkBufferKind kind, AmkDType dtype,
                                  uint32_t rank, const int64_t *dims,
                                  const char *source) {
  AmkValue *shape = amk_arena_alloc(&m->arena, sizeof *shape * rank);
  for (uint32_t i = 0; i < rank; i++)
    shape[i] = amk_value_int(dims[i]);
  AmkBuffer *buf = amk_module_add_buffer(m);
  buf->name = name;
  buf->kind = kind;
  buf->dtype = dtype;
  buf->rank = rank;
  buf->shape = shape;
  buf->space = AMK_SPACE_HBM;
  buf->source = source;
  return buf->id;
}

bool amk_module_ids_are_positions(const AmkModule *m) {
  for (uint32_t i = 0; i < m->n_buffers; i++)
    if (m->buffers[i].id != (int32_t)i)
      return false;
  for (uint32_t i = 0; i < m->n_counters; i++)
    if (m->counters[i].id != (int32_t)i)
      return false;
  return true;
}
