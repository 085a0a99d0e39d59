/* The `verify` pass: structural well-formedness only (no graph reasoning).
 *
 * Every record must be internally consistent: ids unique, references
 * resolvable, arities and ABI caps respected, params typed as they marshal,
 * wait thresholds positive INTs, shapes positive INTs. Messages name the task
 * (id and label), buffer or counter; for JSON input (no line) they start with
 * the JSON path of the offending field, e.g. `tasks[12].waits[0].threshold`.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/pass.h"
#include "amk/validate.h"
#include "validate_graph.h"

/* Diagnostics about the module as a whole carry no position. */
static const AmkLoc no_loc = {0, 0};

typedef struct {
  const AmkModule *m;
  AmkDiagEngine *diag;
  int errors;
  /* JSON carets point at the record; the path names the field in it. */
  bool json_paths;
  AmkIdIndex bufs, ctrs, tasks, pages;
} Verifier;

enum { MAX_VERIFY_ERRORS = 200 };

static void verr(Verifier *v, AmkLoc loc, const char *path, const char *fmt,
                 ...) AMK_PRINTF(4, 5);
static void verr(Verifier *v, AmkLoc loc, const char *path, const char *fmt,
                 ...) {
  if (v->errors == MAX_VERIFY_ERRORS)
    amk_note(v->diag, no_loc, "too many errors; verification stopped");
  if (v->errors++ >= MAX_VERIFY_ERRORS)
    return;
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (loc.line == 0 || v->json_paths)
    amk_error(v->diag, loc, "%s: %s", path, msg);
  else
    amk_error(v->diag, loc, "%s", msg);
}

static const char *name_or_empty(const char *s) { return s ? s : ""; }

static void verify_buffers(Verifier *v) {
  const AmkModule *m = v->m;
  char path[96], repr[96];
  /* Names are unique: a map from name hash would do, but names are short and
   * a sorted index keeps this simple and O(n log n). */
  AmkIdMap first_by_hash;
  amk_idmap_init(&first_by_hash, m->n_buffers);
  for (uint32_t b = 0; b < m->n_buffers; b++) {
    const AmkBuffer *buf = &m->buffers[b];
    snprintf(path, sizeof path, "buffers[%u]", b);
    uint32_t first = amk_id_index_get(&v->bufs, buf->id);
    if (first != b)
      verr(v, buf->loc, path, "duplicate buffer id %" PRId32 " (first at buffers[%u])",
           buf->id, first);
    if ((unsigned)buf->kind >= AMK_KIND_COUNT ||
        (unsigned)buf->dtype >= AMK_DTYPE_COUNT ||
        (unsigned)buf->space >= AMK_SPACE_COUNT)
      verr(v, buf->loc, path, "buffer #%" PRId32 " ('%s') has an invalid kind, dtype or space",
           buf->id, name_or_empty(buf->name));
    if (buf->rank > AMK_MAX_RANK)
      verr(v, buf->loc, path, "buffer #%" PRId32 " ('%s') rank %u > ABI_MAX_RANK=%d",
           buf->id, name_or_empty(buf->name), buf->rank, AMK_MAX_RANK);
    for (uint32_t i = 0; i < buf->rank; i++) {
      int64_t d;
      if (amk_value_as_int(&buf->shape[i], &d) && d >= 1)
        continue;
      amk_value_repr(&buf->shape[i], repr, sizeof repr);
      snprintf(path, sizeof path, "buffers[%u].shape[%u]", b, i);
      verr(v, buf->loc, path,
           "buffer #%" PRId32 " ('%s') dim %u is %s, expected a positive integer",
           buf->id, name_or_empty(buf->name), i, repr);
    }
    /* Duplicate names: hash the name into an int32 key, confirm by strcmp. */
    uint32_t h = 2166136261u;
    for (const char *p = name_or_empty(buf->name); *p; p++)
      h = (h ^ (unsigned char)*p) * 16777619u;
    for (uint32_t probe = 0;; probe++) {
      int32_t key = (int32_t)(h + probe * 0x9e3779b9u);
      uint32_t other = amk_idmap_put(&first_by_hash, key, b);
      if (other == b)
        break;
      if (strcmp(name_or_empty(m->buffers[other].name), name_or_empty(buf->name)) == 0) {
        snprintf(path, sizeof path, "buffers[%u].name", b);
        verr(v, buf->loc, path,
             "duplicate buffer name '%s' (buffers #%" PRId32 " and #%" PRId32 ")",
             name_or_empty(buf->name), m->buffers[other].id, buf->id);
        break;
      }
    }
  }
  amk_idmap_free(&first_by_hash);
}

static void verify_counters(Verifier *v) {
  const AmkModule *m = v->m;
  char path[64];
  for (uint32_t c = 0; c < m->n_counters; c++) {
    uint32_t first = amk_id_index_get(&v->ctrs, m->counters[c].id);
    if (first == c)
      continue;
    snprintf(path, sizeof path, "counters[%u]", c);
    verr(v, m->counters[c].loc, path,
         "duplicate counter id %" PRId32 " (first at counters[%u])",
         m->counters[c].id, first);
  }
}

static void verify_buffer_ref(Verifier *v, const AmkTask *t, uint32_t ti,
                              const char *field, uint32_t i, int32_t id) {
  if (amk_id_index_get(&v->bufs, id) != AMK_NO_INDEX)
    return;
  char path[96];
  snprintf(path, sizeof path, "tasks[%u].%s[%u]", ti, field, i);
  verr(v, t->loc, path, "task %" PRId32 " (%s) %s missing buffer %" PRId32,
       t->id, name_or_empty(t->label),
       strcmp(field, "inputs") == 0 ? "reads" : "writes", id);
}

static void verify_task(Verifier *v, const AmkTask *t, uint32_t ti) {
  char path[128], repr[96];
  const char *label = name_or_empty(t->label);
  snprintf(path, sizeof path, "tasks[%u]", ti);
  uint32_t first = amk_id_index_get(&v->tasks, t->id);
  if (first != ti)
    verr(v, t->loc, path, "duplicate task id %" PRId32 " (first at tasks[%u])",
         t->id, first);
  if ((unsigned)t->op >= AMK_OP_COUNT) {
    verr(v, t->loc, path, "task %" PRId32 " (%s) has an invalid opcode %d",
         t->id, label, (int)t->op);
    return;
  }
  const AmkOpInfo *info = amk_op_info(t->op);
  for (uint32_t i = 0; i < t->n_inputs; i++)
    verify_buffer_ref(v, t, ti, "inputs", i, t->inputs[i]);
  for (uint32_t i = 0; i < t->n_outputs; i++)
    verify_buffer_ref(v, t, ti, "outputs", i, t->outputs[i]);
  int64_t flags;
  if (!amk_task_param_int(t, "flags", &flags))
    flags = 0;
  int max_inputs = amk_op_max_inputs(t->op, flags);
  if (t->n_inputs > AMK_MAX_INPUTS || (int64_t)t->n_inputs < info->min_inputs ||
      (max_inputs != -1 && (int64_t)t->n_inputs > max_inputs)) {
    snprintf(path, sizeof path, "tasks[%u].inputs", ti);
    verr(v, t->loc, path,
         "task %" PRId32 " (%s) %s has %u inputs, expected %d to %d (ABI cap %d)",
         t->id, label, info->json_name, t->n_inputs, info->min_inputs,
         max_inputs == -1 ? AMK_MAX_INPUTS : max_inputs, AMK_MAX_INPUTS);
  }
  if (t->n_outputs > AMK_MAX_OUTPUTS || (int64_t)t->n_outputs != info->n_outputs) {
    snprintf(path, sizeof path, "tasks[%u].outputs", ti);
    verr(v, t->loc, path,
         "task %" PRId32 " (%s) %s has %u outputs, expected %d (ABI cap %d)",
         t->id, label, info->json_name, t->n_outputs, info->n_outputs,
         AMK_MAX_OUTPUTS);
  }
  if (amk_id_index_get(&v->ctrs, t->out_counter) == AMK_NO_INDEX) {
    snprintf(path, sizeof path, "tasks[%u].out_counter", ti);
    verr(v, t->loc, path, "task %" PRId32 " (%s) signals missing counter %" PRId32,
         t->id, label, t->out_counter);
  }
  if (t->n_waits > AMK_MAX_WAITS) {
    snprintf(path, sizeof path, "tasks[%u].waits", ti);
    verr(v, t->loc, path, "task %" PRId32 " (%s) has %u waits > ABI_MAX_WAITS=%d",
         t->id, label, t->n_waits, AMK_MAX_WAITS);
  }
  for (uint32_t i = 0; i < t->n_waits; i++) {
    const AmkWait *w = &t->waits[i];
    if (amk_id_index_get(&v->ctrs, w->counter) == AMK_NO_INDEX) {
      snprintf(path, sizeof path, "tasks[%u].waits[%u].counter", ti, i);
      verr(v, t->loc, path, "task %" PRId32 " (%s) waits on missing counter %" PRId32,
           t->id, label, w->counter);
    }
    int64_t thr;
    if (!amk_value_as_int(&w->threshold, &thr) || thr < 1) {
      amk_value_repr(&w->threshold, repr, sizeof repr);
      snprintf(path, sizeof path, "tasks[%u].waits[%u].threshold", ti, i);
      verr(v, t->loc, path,
           "task %" PRId32 " (%s) threshold %s on counter %" PRId32
           " must be an integer >= 1",
           t->id, label, repr, w->counter);
    }
  }
  for (int f = 0; f < AMK_PARAM_COUNT; f++)
    if ((info->required_params & (1u << f)) &&
        !amk_task_param(t, amk_param_name((AmkParamField)f))) {
      snprintf(path, sizeof path, "tasks[%u].params", ti);
      verr(v, t->loc, path, "task %" PRId32 " (%s) %s is missing param '%s'",
           t->id, label, info->json_name, amk_param_name((AmkParamField)f));
    }
  if ((info->required_params & AMK_REQ_RECIPE) && !amk_task_param(t, "recipe")) {
    snprintf(path, sizeof path, "tasks[%u].params", ti);
    verr(v, t->loc, path, "task %" PRId32 " (%s) %s is missing param 'recipe'",
         t->id, label, info->json_name);
  }
  for (uint32_t i = 0; i < t->n_params; i++) {
    const AmkParam *p = &t->params[i];
    int field = amk_param_from_name(name_or_empty(p->key));
    if (field < 0)
      continue; /* unknown keys only warn (in validate) */
    snprintf(path, sizeof path, "tasks[%u].params.%s", ti, name_or_empty(p->key));
    if (amk_param_type((AmkParamField)field) == 'i') {
      int64_t x;
      if (!amk_value_as_int(&p->value, &x) || x < INT32_MIN || x > INT32_MAX) {
        amk_value_repr(&p->value, repr, sizeof repr);
        verr(v, t->loc, path,
             "task %" PRId32 " (%s) param '%s'=%s must be an int32", t->id,
             label, p->key, repr);
      }
    } else {
      double x;
      if (!amk_value_as_real(&p->value, &x)) {
        amk_value_repr(&p->value, repr, sizeof repr);
        verr(v, t->loc, path,
             "task %" PRId32 " (%s) param '%s'=%s must be a number", t->id,
             label, p->key, repr);
      }
    }
  }
}

static void verify_pages(Verifier *v) {
  const AmkPageAllocation *pa = v->m->pages;
  char path[96];
  for (uint32_t i = 0; i < pa->n_pages; i++) {
    uint32_t first = amk_id_index_get(&v->pages, pa->pages[i].id);
    if (first != i) {
      snprintf(path, sizeof path, "pages.pages[%u]", i);
      verr(v, no_loc, path,
           "duplicate page id %" PRId32 " (first at pages.pages[%u])",
           pa->pages[i].id, first);
    }
  }
  for (uint32_t i = 0; i < pa->n_bindings; i++) {
    const AmkPageBinding *pb = &pa->bindings[i];
    snprintf(path, sizeof path, "pages.buffer_to_page.%" PRId32, pb->buffer);
    if (amk_id_index_get(&v->bufs, pb->buffer) == AMK_NO_INDEX)
      verr(v, no_loc, path, "page binding names missing buffer %" PRId32,
           pb->buffer);
    if (amk_id_index_get(&v->pages, pb->page) == AMK_NO_INDEX)
      verr(v, no_loc, path,
           "buffer %" PRId32 " is bound to missing page %" PRId32, pb->buffer,
           pb->page);
  }
}

bool amk_verify_module(const AmkModule *m, AmkDiagEngine *diag) {
  Verifier v;
  memset(&v, 0, sizeof v);
  v.m = m;
  v.diag = diag;
  size_t name_len = m->source_name ? strlen(m->source_name) : 0;
  v.json_paths = name_len >= 5 && strcmp(m->source_name + name_len - 5, ".json") == 0;
  amk_id_index_build(&v.bufs, m->buffers, sizeof *m->buffers, m->n_buffers);
  amk_id_index_build(&v.ctrs, m->counters, sizeof *m->counters, m->n_counters);
  amk_id_index_build(&v.tasks, m->tasks, sizeof *m->tasks, m->n_tasks);
  if (m->pages)
    amk_id_index_build(&v.pages, m->pages->pages, sizeof *m->pages->pages,
                       m->pages->n_pages);
  else
    amk_id_index_build(&v.pages, NULL, sizeof(AmkPage), 0);
  verify_buffers(&v);
  verify_counters(&v);
  for (uint32_t t = 0; t < m->n_tasks && v.errors < MAX_VERIFY_ERRORS; t++)
    verify_task(&v, &m->tasks[t], t);
  if (m->pages)
    verify_pages(&v);
  amk_id_index_free(&v.bufs);
  amk_id_index_free(&v.ctrs);
  amk_id_index_free(&v.tasks);
  amk_id_index_free(&v.pages);
  return v.errors == 0;
}

bool amk_pass_verify(AmkModule *m, AmkPassContext *ctx) {
  return amk_verify_module(m, ctx->diag);
}
