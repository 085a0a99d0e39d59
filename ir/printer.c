/* The `.amkir` printer. Its output parses back to the same module, and
 * printing that module again gives the same bytes (docs/LangRef.md).
 *
 * References are printed by name when the name picks exactly one record,
 * and by id otherwise (a repeated name, a dangling id, an unnamed counter).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "amk/io.h"
#include "amk/ir.h"
#include "amk/namemap.h"

/* Lookup tables built once per print, so printing is linear in the module. */
typedef struct {
  AmkNameMap buffer_names, counter_names;
  /* id -> first record index with that id; open addressing on ids */
  int32_t *buffer_by_id, *counter_by_id;
  size_t buffer_cap, counter_cap;
  const AmkModule *m;
} Printer;

static size_t id_slot(int32_t id, size_t cap) {
  return ((uint32_t)id * 2654435761u) & (cap - 1);
}

/* index+1 stored (0 = empty) */
static int32_t *build_id_index(size_t n, int32_t (*id_of)(const AmkModule *, size_t),
                               const AmkModule *m, size_t *cap_out) {
  size_t cap = 16;
  while (cap < n * 2)
    cap *= 2;
  int32_t *table = amk_xcalloc(cap, sizeof *table);
  for (size_t i = 0; i < n; i++) {
    int32_t id = id_of(m, i);
    size_t s = id_slot(id, cap);
    while (table[s] && id_of(m, (size_t)table[s] - 1) != id)
      s = (s + 1) & (cap - 1);
    if (!table[s])
      table[s] = (int32_t)i + 1;
  }
  *cap_out = cap;
  return table;
}

static int32_t find_by_id(const int32_t *table, size_t cap, int32_t id,
                          int32_t (*id_of)(const AmkModule *, size_t),
                          const AmkModule *m) {
  size_t s = id_slot(id, cap);
  while (table[s]) {
    if (id_of(m, (size_t)table[s] - 1) == id)
      return table[s] - 1;
    s = (s + 1) & (cap - 1);
  }
  return -1;
}

static int32_t buffer_id_at(const AmkModule *m, size_t i) {
  return m->buffers[i].id;
}
static int32_t counter_id_at(const AmkModule *m, size_t i) {
  return m->counters[i].id;
}

static const char *buffer_name(const AmkBuffer *b) {
  return b->name ? b->name : "";
}

/* ---- strings and values ------------------------------------------------ */

static void put_string(AmkStrBuf *out, const char *s) {
  amk_sb_putc(out, '"');
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    switch (*c) {
    case '"': amk_sb_puts(out, "\\\""); break;
    case '\\': amk_sb_puts(out, "\\\\"); break;
    case '\n': amk_sb_puts(out, "\\n"); break;
    case '\t': amk_sb_puts(out, "\\t"); break;
    case '\r': amk_sb_puts(out, "\\r"); break;
    default:
      /* other control bytes escape; bytes >= 0x80 (UTF-8) pass through */
      if (*c < 0x20 || *c == 0x7f)
        amk_sb_printf(out, "\\u%04x", *c);
      else
        amk_sb_putc(out, (char)*c);
    }
  }
  amk_sb_putc(out, '"');
}

/* A name where an identifier may stand: bare when it lexes as one. */
static void put_name(AmkStrBuf *out, const char *s) {
  if (amk_text_is_identifier(s, strlen(s)))
    amk_sb_puts(out, s);
  else
    put_string(out, s);
}

/* An object key: bare unless it would lex as a number word (nan, inf). */
static void put_key(AmkStrBuf *out, const char *s) {
  if (strcmp(s, "nan") == 0 || strcmp(s, "inf") == 0)
    put_string(out, s);
  else
    put_name(out, s);
}

/* A free word (target name): also quoted when it is a reserved word. */
static void put_word(AmkStrBuf *out, const char *s) {
  size_t n = strlen(s);
  if (amk_text_is_identifier(s, n) && !amk_text_is_keyword(s, n))
    amk_sb_puts(out, s);
  else
    put_string(out, s);
}

static void put_float(AmkStrBuf *out, double f) {
  char buf[32];
  int n = amk_format_float_repr(f, buf);
  amk_sb_putn(out, buf, (size_t)n);
}

static void put_value(AmkStrBuf *out, const AmkValue *v) {
  switch (v->kind) {
  case AMK_VALUE_NULL: amk_sb_puts(out, "null"); break;
  case AMK_VALUE_BOOL: amk_sb_puts(out, v->as.b ? "true" : "false"); break;
  case AMK_VALUE_INT: amk_sb_printf(out, "%" PRId64, v->as.i); break;
  case AMK_VALUE_FLOAT: put_float(out, v->as.f); break;
  case AMK_VALUE_STRING: put_string(out, v->as.s ? v->as.s : ""); break;
  case AMK_VALUE_LIST:
    amk_sb_putc(out, '[');
    for (uint32_t i = 0; i < v->count; i++) {
      if (i)
        amk_sb_puts(out, ", ");
      put_value(out, &v->as.items[i]);
    }
    amk_sb_putc(out, ']');
    break;
  case AMK_VALUE_OBJECT:
    amk_sb_putc(out, '{');
    for (uint32_t i = 0; i < v->count; i++) {
      if (i)
        amk_sb_puts(out, ", ");
      put_key(out, v->as.members[i].key);
      amk_sb_puts(out, " = ");
      put_value(out, &v->as.members[i].value);
    }
    amk_sb_putc(out, '}');
    break;
  }
}

/* ---- references -------------------------------------------------------- */

static void put_buffer_ref(AmkStrBuf *out, const Printer *pr, int32_t id) {
  int32_t index = find_by_id(pr->buffer_by_id, pr->buffer_cap, id,
                             buffer_id_at, pr->m);
  if (index >= 0) {
    const char *name = buffer_name(&pr->m->buffers[index]);
    const AmkNameSlot *slot =
        amk_name_map_find(&pr->buffer_names, name, strlen(name));
    if (slot && slot->count == 1) {
      amk_sb_putc(out, '%');
      put_name(out, name);
      return;
    }
  }
  amk_sb_printf(out, "%%%" PRId32, id);
}

static void put_counter_ref(AmkStrBuf *out, const Printer *pr, int32_t id) {
  int32_t index = find_by_id(pr->counter_by_id, pr->counter_cap, id,
                             counter_id_at, pr->m);
  if (index >= 0) {
    const char *name = pr->m->counters[index].name;
    const AmkNameSlot *slot =
        name ? amk_name_map_find(&pr->counter_names, name, strlen(name)) : NULL;
    if (slot && slot->count == 1) {
      amk_sb_putc(out, '#');
      put_name(out, name);
      return;
    }
  }
  amk_sb_printf(out, "#%" PRId32, id);
}

/* ---- version strings: bare when they lex as a number or version ---------- */

static void put_version(AmkStrBuf *out, const char *v) {
  bool bare = v[0] != 0;
  bool need_digit = true;
  for (const char *c = v; *c && bare; c++) {
    if (*c >= '0' && *c <= '9')
      need_digit = false;
    else if (*c == '.' && !need_digit)
      need_digit = true;
    else
      bare = false;
  }
  if (bare && !need_digit)
    amk_sb_puts(out, v);
  else
    put_string(out, v);
}

/* ---- records ----------------------------------------------------------- */

static void print_target(AmkStrBuf *out, const AmkTarget *t) {
  amk_sb_puts(out, "target ");
  put_word(out, t->name ? t->name : "");
  amk_sb_puts(out, " {");
  bool first = true;
#define PUT_INT(field) amk_sb_printf(out, "%" PRId64, t->field)
#define PUT_FLOAT(field) put_float(out, t->field)
#define PUT_BOOL(field) amk_sb_puts(out, t->field ? "true" : "false")
#define PUT_STR(field) put_string(out, t->field ? t->field : "")
#define X(field, kind)                                                         \
  if (strcmp(#field, "name") != 0) {                                           \
    amk_sb_puts(out, first ? "" : ", ");                                       \
    first = false;                                                             \
    amk_sb_puts(out, #field " = ");                                            \
    PUT_##kind(field);                                                         \
  }
  AMK_TARGET_FIELDS(X)
#undef X
#undef PUT_INT
#undef PUT_FLOAT
#undef PUT_BOOL
#undef PUT_STR
  amk_sb_puts(out, "}\n");
}

static void print_config(AmkStrBuf *out, const AmkConfig *c) {
  amk_sb_puts(out, "config {tiling = ");
  put_value(out, &c->tiling);
  amk_sb_puts(out, ", fusion_grouping = ");
  put_value(out, &c->fusion_grouping);
  amk_sb_puts(out, ", sm_assignment = ");
  if (c->sm_assignment == AMK_SM_EXPLICIT) {
    amk_sb_putc(out, '{');
    for (uint32_t i = 0; i < c->n_sm_map; i++)
      amk_sb_printf(out, "%s%" PRId32 " = %" PRId32, i ? ", " : "",
                    c->sm_map[i].task, c->sm_map[i].sm);
    amk_sb_putc(out, '}');
  } else {
    amk_sb_puts(out, amk_sm_policy_name(c->sm_assignment));
  }
  amk_sb_printf(out, ", pipelining_depth = %" PRId64, c->pipelining_depth);
  amk_sb_printf(out, ", page_allocation = %s",
                amk_page_policy_name(c->page_allocation));
  amk_sb_printf(out, ", threads_per_block = %" PRId64, c->threads_per_block);
  amk_sb_printf(out, ", smem_bytes_per_block = %" PRId64 "}\n",
                c->smem_bytes_per_block);
}

static void print_buffer(AmkStrBuf *out, const Printer *pr, uint32_t index) {
  const AmkBuffer *b = &pr->m->buffers[index];
  const char *name = buffer_name(b);
  const AmkNameSlot *slot =
      amk_name_map_find(&pr->buffer_names, name, strlen(name));
  amk_sb_puts(out, "buffer ");
  /* an explicit id when it is not the position, or the name repeats */
  if (b->id != (int32_t)index || (slot && slot->count > 1))
    amk_sb_printf(out, "%" PRId32 " ", b->id);
  amk_sb_putc(out, '%');
  put_name(out, name);
  amk_sb_printf(out, " : %s[", amk_dtype_text_name(b->dtype));
  for (uint32_t i = 0; i < b->rank; i++) {
    if (i)
      amk_sb_puts(out, ", ");
    put_value(out, &b->shape[i]);
  }
  amk_sb_printf(out, "] %s", amk_kind_text_name(b->kind));
  if (b->space != AMK_SPACE_HBM)
    amk_sb_printf(out, " %s", amk_space_text_name(b->space));
  if (b->source) {
    amk_sb_puts(out, " source ");
    put_string(out, b->source);
  }
  amk_sb_putc(out, '\n');
}

static void print_counter(AmkStrBuf *out, const Printer *pr, uint32_t index) {
  const AmkCounter *c = &pr->m->counters[index];
  amk_sb_puts(out, "counter ");
  if (c->name) {
    const AmkNameSlot *slot =
        amk_name_map_find(&pr->counter_names, c->name, strlen(c->name));
    if (c->id != (int32_t)index || (slot && slot->count > 1))
      amk_sb_printf(out, "%" PRId32 " ", c->id);
    amk_sb_putc(out, '#');
    put_name(out, c->name);
  } else {
    amk_sb_printf(out, "#%" PRId32, c->id);
  }
  amk_sb_putc(out, ' ');
  put_string(out, c->note ? c->note : "");
  if (c->init)
    amk_sb_printf(out, " init %" PRId64, c->init);
  amk_sb_putc(out, '\n');
}

static void print_task(AmkStrBuf *out, const Printer *pr, const AmkTask *t) {
  const AmkOpInfo *info = amk_op_info(t->op);
  amk_sb_printf(out, "task %" PRId32 " %s(", t->id, info->text_name);
  for (uint32_t i = 0; i < t->n_inputs; i++) {
    if (i)
      amk_sb_puts(out, ", ");
    put_buffer_ref(out, pr, t->inputs[i]);
  }
  amk_sb_puts(out, ") -> ");
  if (!t->n_outputs)
    amk_sb_puts(out, "()");
  for (uint32_t i = 0; i < t->n_outputs; i++) {
    if (i)
      amk_sb_puts(out, ", ");
    put_buffer_ref(out, pr, t->outputs[i]);
  }
  for (uint32_t i = 0; i < t->n_waits; i++) {
    amk_sb_puts(out, i ? ", " : " wait ");
    put_counter_ref(out, pr, t->waits[i].counter);
    amk_sb_puts(out, " >= ");
    put_value(out, &t->waits[i].threshold);
  }
  amk_sb_puts(out, " signal ");
  put_counter_ref(out, pr, t->out_counter);
  if (t->n_params) {
    amk_sb_puts(out, " {");
    for (uint32_t i = 0; i < t->n_params; i++) {
      if (i)
        amk_sb_puts(out, ", ");
      put_key(out, t->params[i].key);
      amk_sb_puts(out, " = ");
      put_value(out, &t->params[i].value);
    }
    amk_sb_putc(out, '}');
  }
  if (t->has_sm)
    amk_sb_printf(out, " sm %" PRId32, t->sm);
  if (t->est_bytes || t->est_flops)
    amk_sb_printf(out, " cost %" PRId64 " bytes %" PRId64 " flops",
                  t->est_bytes, t->est_flops);
  if (t->label && t->label[0]) {
    amk_sb_puts(out, " label ");
    put_string(out, t->label);
  }
  amk_sb_putc(out, '\n');
}

static void print_pages(AmkStrBuf *out, const Printer *pr,
                        const AmkPageAllocation *pages) {
  if (!pages->n_pages && !pages->n_bindings) {
    amk_sb_puts(out, "pages {}\n");
    return;
  }
  amk_sb_puts(out, "pages {\n");
  for (uint32_t i = 0; i < pages->n_pages; i++) {
    const AmkPage *page = &pages->pages[i];
    amk_sb_printf(out, "  page %" PRId32 " %s %" PRId64, page->id,
                  amk_space_text_name(page->space), page->nbytes);
    if (page->live_start != -1 || page->live_end != -1)
      amk_sb_printf(out, " live %" PRId64 " .. %" PRId64, page->live_start,
                    page->live_end);
    amk_sb_putc(out, '\n');
  }
  for (uint32_t i = 0; i < pages->n_bindings; i++) {
    amk_sb_puts(out, "  ");
    put_buffer_ref(out, pr, pages->bindings[i].buffer);
    amk_sb_printf(out, " -> %" PRId32 "\n", pages->bindings[i].page);
  }
  amk_sb_puts(out, "}\n");
}

void amk_print_text(const AmkModule *m, AmkStrBuf *out) {
  Printer pr;
  memset(&pr, 0, sizeof pr);
  pr.m = m;
  for (uint32_t i = 0; i < m->n_buffers; i++) {
    const char *name = buffer_name(&m->buffers[i]);
    amk_name_map_add(&pr.buffer_names, name, strlen(name), (int32_t)i);
  }
  for (uint32_t i = 0; i < m->n_counters; i++)
    if (m->counters[i].name)
      amk_name_map_add(&pr.counter_names, m->counters[i].name,
                       strlen(m->counters[i].name), (int32_t)i);
  pr.buffer_by_id =
      build_id_index(m->n_buffers, buffer_id_at, m, &pr.buffer_cap);
  pr.counter_by_id =
      build_id_index(m->n_counters, counter_id_at, m, &pr.counter_cap);

  amk_sb_puts(out, "amkir ");
  put_version(out, m->ir_version ? m->ir_version : AMK_IR_VERSION);
  amk_sb_puts(out, ", abi ");
  put_version(out, m->abi_version ? m->abi_version : AMK_ABI_VERSION);
  amk_sb_putc(out, '\n');
  if (m->model_dir) {
    amk_sb_puts(out, "model ");
    put_string(out, m->model_dir);
    amk_sb_putc(out, '\n');
  }
  if (!(m->meta.kind == AMK_VALUE_OBJECT && m->meta.count == 0)) {
    amk_sb_puts(out, "meta ");
    put_value(out, &m->meta);
    amk_sb_putc(out, '\n');
  }
  if (m->target)
    print_target(out, m->target);
  if (m->config)
    print_config(out, m->config);
  if (m->n_buffers || m->n_counters || m->n_tasks || m->pages)
    amk_sb_putc(out, '\n');
  for (uint32_t i = 0; i < m->n_buffers; i++)
    print_buffer(out, &pr, i);
  for (uint32_t i = 0; i < m->n_counters; i++)
    print_counter(out, &pr, i);
  for (uint32_t i = 0; i < m->n_tasks; i++)
    print_task(out, &pr, &m->tasks[i]);
  if (m->pages)
    print_pages(out, &pr, m->pages);

  amk_name_map_free(&pr.buffer_names);
  amk_name_map_free(&pr.counter_names);
  free(pr.buffer_by_id);
  free(pr.counter_by_id);
}
