/* The module: growable record arrays in its arena (arena.c), and the small
 * queries every pass needs. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "amk/diag.h"
#include "amk/ir.h"
#include "amk/path.h"

/* ---- module ---------------------------------------------------------------- */

AmkModule *amk_module_new(void) {
  AmkModule *m = amk_xcalloc(1, sizeof *m);
  m->ir_version = AMK_IR_VERSION;
  m->abi_version = AMK_ABI_VERSION;
  m->meta.kind = AMK_VALUE_OBJECT;
  return m;
}

void amk_module_free(AmkModule *m) {
  if (!m)
    return;
  free(m->buffers);
  free(m->counters);
  free(m->tasks);
  amk_arena_free(&m->arena);
  free(m);
}

static void *grow(void *array, uint32_t *cap, uint32_t n, size_t elem) {
  if (n < *cap)
    return array;
  uint32_t new_cap = *cap ? *cap * 2 : 64;
  array = amk_xrealloc(array, (size_t)new_cap * elem);
  *cap = new_cap;
  return array;
}

/* Zeroes the record after the last `*n` and gives it the next id; records
 * start with their int32_t id. */
_Static_assert(offsetof(AmkBuffer, id) == 0 && offsetof(AmkCounter, id) == 0 &&
                   offsetof(AmkTask, id) == 0,
               "records start with their id");
static void *new_record(void *array, uint32_t *n, size_t elem) {
  char *record = (char *)array + (size_t)*n * elem;
  memset(record, 0, elem);
  int32_t id = (int32_t)(*n)++;
  memcpy(record, &id, sizeof id);
  return record;
}

AmkBuffer *amk_module_add_buffer(AmkModule *m) {
  m->buffers = grow(m->buffers, &m->cap_buffers, m->n_buffers, sizeof *m->buffers);
  return new_record(m->buffers, &m->n_buffers, sizeof *m->buffers);
}

AmkCounter *amk_module_add_counter(AmkModule *m) {
  m->counters = grow(m->counters, &m->cap_counters, m->n_counters, sizeof *m->counters);
  AmkCounter *c = new_record(m->counters, &m->n_counters, sizeof *m->counters);
  c->note = "";
  return c;
}

AmkTask *amk_module_add_task(AmkModule *m) {
  m->tasks = grow(m->tasks, &m->cap_tasks, m->n_tasks, sizeof *m->tasks);
  AmkTask *t = new_record(m->tasks, &m->n_tasks, sizeof *m->tasks);
  t->label = "";
  return t;
}

#define FIND_BY_ID(array, count, id)                                           \
  do {                                                                         \
    if (id >= 0 && (uint32_t)id < (count) && (array)[id].id == id)             \
      return &(array)[id];                                                     \
    for (uint32_t i_ = 0; i_ < (count); i_++)                                  \
      if ((array)[i_].id == id)                                                \
        return &(array)[i_];                                                   \
    return NULL;                                                               \
  } while (0)

const AmkBuffer *amk_module_buffer(const AmkModule *m, int32_t id) {
  FIND_BY_ID(m->buffers, m->n_buffers, id);
}
const AmkCounter *amk_module_counter(const AmkModule *m, int32_t id) {
  FIND_BY_ID(m->counters, m->n_counters, id);
}
const AmkTask *amk_module_task(const AmkModule *m, int32_t id) {
  FIND_BY_ID(m->tasks, m->n_tasks, id);
}

/* ---- params ------------------------------------------------------------------ */

const AmkValue *amk_task_param(const AmkTask *t, const char *key) {
  /* The last occurrence wins, as a later JSON key overrides an earlier one. */
  for (uint32_t i = t->n_params; i-- > 0;)
    if (strcmp(t->params[i].key, key) == 0)
      return &t->params[i].value;
  return NULL;
}

bool amk_task_param_int(const AmkTask *t, const char *key, int64_t *out) {
  const AmkValue *v = amk_task_param(t, key);
  return v && amk_value_as_int(v, out);
}

bool amk_task_param_real(const AmkTask *t, const char *key, double *out) {
  const AmkValue *v = amk_task_param(t, key);
  return v && amk_value_as_real(v, out);
}

void amk_task_set_param(AmkModule *m, AmkTask *t, const char *key,
                        AmkValue value) {
  for (uint32_t i = 0; i < t->n_params; i++)
    if (strcmp(t->params[i].key, key) == 0) {
      t->params[i].value = value;
      return;
    }
  AmkParam *params = amk_arena_alloc(&m->arena, (t->n_params + 1) * sizeof *params);
  if (t->n_params)
    memcpy(params, t->params, t->n_params * sizeof *params);
  params[t->n_params].key = amk_arena_strdup(&m->arena, key);
  params[t->n_params].value = value;
  t->params = params;
  t->n_params++;
}

/* ---- sizes ----------------------------------------------------------------- */

bool amk_same_major_version(const char *a, const char *b) {
  size_t la = strcspn(a, "."), lb = strcspn(b, ".");
  return la == lb && memcmp(a, b, la) == 0;
}

bool amk_buffer_numel(const AmkBuffer *b, int64_t *out) {
  int64_t n = 1;
  for (uint32_t i = 0; i < b->rank; i++) {
    int64_t d;
    if (!amk_value_as_int(&b->shape[i], &d) || d < 0)
      return false;
    if (d != 0 && n > INT64_MAX / 8 / d) /* keep nbytes from overflowing too */
      return false;
    n *= d;
  }
  *out = n;
  return true;
}

bool amk_buffer_nbytes(const AmkBuffer *b, int64_t *out) {
  int64_t n;
  if (!amk_buffer_numel(b, &n))
    return false;
  *out = amk_dtype_nbytes(b->dtype, n);
  return true;
}

int64_t amk_module_weight_bytes(const AmkModule *m) {
  int64_t total = 0;
  for (uint32_t i = 0; i < m->n_buffers; i++) {
    int64_t n;
    if (m->buffers[i].kind == AMK_KIND_WEIGHT && amk_buffer_nbytes(&m->buffers[i], &n))
      total += n;
  }
  return total;
}

int64_t amk_module_streamed_weight_bytes(const AmkModule *m) {
  /* Readers of each weight: whether any is not an EMBED (which gathers one
   * row), and how many EMBED reads there are. */
  bool *full = amk_xcalloc(m->n_buffers ? m->n_buffers : 1, sizeof *full);
  int64_t *rows_read = amk_xcalloc(m->n_buffers ? m->n_buffers : 1, sizeof *rows_read);
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    const AmkTask *task = &m->tasks[t];
    for (uint32_t i = 0; i < task->n_inputs; i++) {
      const AmkBuffer *b = amk_module_buffer(m, task->inputs[i]);
      if (!b)
        continue;
      size_t k = (size_t)(b - m->buffers);
      if (task->op == AMK_OP_EMBED && i == 1)
        rows_read[k]++;
      else
        full[k] = true;
    }
  }
  int64_t total = 0;
  for (uint32_t k = 0; k < m->n_buffers; k++) {
    const AmkBuffer *b = &m->buffers[k];
    int64_t nbytes, rows;
    if (b->kind != AMK_KIND_WEIGHT || !amk_buffer_nbytes(b, &nbytes))
      continue;
    if (full[k])
      total += nbytes;
    else if (rows_read[k] && b->rank >= 1 && amk_value_as_int(&b->shape[0], &rows) && rows > 0)
      total += nbytes / rows * rows_read[k];
  }
  free(full);
  free(rows_read);
  return total;
}

/* ---- the model folder ----------------------------------------------------- */

char *amk_module_model_folder(const AmkModule *m) {
  const char *dir = m->model_dir, *src = m->source_name;
  if (!dir)
    return NULL;
  if (dir[0] == '/' || !src || strcmp(src, dir) == 0 || src[0] == '<')
    return amk_xstrdup(dir);
  const char *slash = strrchr(src, '/');
  if (!slash)
    return amk_xstrdup(dir);
  char *parent = amk_xmalloc((size_t)(slash - src) + 2);
  memcpy(parent, src, (size_t)(slash - src) + 1);
  parent[slash - src + 1] = '\0';
  char *joined = amk_path_join(parent, dir);
  free(parent);
  return joined;
}
