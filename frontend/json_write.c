/* The reference's JSON on-disk form, written byte for byte as Python's
 * json.dumps(program.to_dict(), indent=2) writes it. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/io.h"
#include "amk/strutil.h"

/* ---- strings ---------------------------------------------------------------- */

static void put_u16_escape(AmkStrBuf *out, unsigned unit) {
  amk_sb_printf(out, "\\u%04x", unit);
}

/* ensure_ascii=True: printable ASCII stays, the short escapes json knows are
 * used, everything else is \uXXXX (astral characters as surrogate pairs). */
void amk_write_json_string(const char *s, AmkStrBuf *out) {
  amk_write_json_string_n(s, strlen(s), out);
}

void amk_write_json_string_n(const char *s, size_t len, AmkStrBuf *out) {
  const unsigned char *p = (const unsigned char *)s, *end = p + len;
  amk_sb_putc(out, '"');
  while (p < end) {
    unsigned char c = *p;
    /* Copy the longest run that needs no escaping in one go. */
    if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') {
      const unsigned char *run = p;
      while (p < end && *p >= 0x20 && *p < 0x7F && *p != '"' && *p != '\\')
        p++;
      amk_sb_putn(out, (const char *)run, (size_t)(p - run));
      continue;
    }
    switch (c) {
    case '"': amk_sb_puts(out, "\\\""); p++; continue;
    case '\\': amk_sb_puts(out, "\\\\"); p++; continue;
    case '\n': amk_sb_puts(out, "\\n"); p++; continue;
    case '\r': amk_sb_puts(out, "\\r"); p++; continue;
    case '\t': amk_sb_puts(out, "\\t"); p++; continue;
    case '\b': amk_sb_puts(out, "\\b"); p++; continue;
    case '\f': amk_sb_puts(out, "\\f"); p++; continue;
    default: break;
    }
    uint32_t cp;
    size_t n = amk_utf8_decode(p, end, &cp);
    if (n == 0) { /* written as U+FFFD, as a lossy decoder would */
      cp = 0xFFFD;
      n = 1;
    }
    p += n;
    if (cp >= 0x10000) {
      cp -= 0x10000;
      put_u16_escape(out, 0xD800 | (cp >> 10));
      put_u16_escape(out, 0xDC00 | (cp & 0x3FF));
    } else {
      put_u16_escape(out, cp);
    }
  }
  amk_sb_putc(out, '"');
}

/* ---- scalars and layout ------------------------------------------------------ */

static void put_float(double f, AmkStrBuf *out) {
  /* json.dumps spells the non-finite values as JavaScript does. */
  if (isnan(f)) {
    amk_sb_puts(out, "NaN");
  } else if (isinf(f)) {
    amk_sb_puts(out, f < 0 ? "-Infinity" : "Infinity");
  } else {
    char buf[32];
    int n = amk_format_float_repr(f, buf);
    amk_sb_putn(out, buf, (size_t)n);
  }
}

/* Decimal digits without printf: integers are most of a program's bytes. */
static void put_int(int64_t i, AmkStrBuf *out) {
  char buf[24];
  char *p = buf + sizeof buf;
  uint64_t magnitude = i < 0 ? (uint64_t)0 - (uint64_t)i : (uint64_t)i;
  do {
    *--p = (char)('0' + magnitude % 10);
    magnitude /= 10;
  } while (magnitude);
  if (i < 0)
    *--p = '-';
  amk_sb_putn(out, p, (size_t)(buf + sizeof buf - p));
}

static void put_bool(bool b, AmkStrBuf *out) { amk_sb_puts(out, b ? "true" : "false"); }

static void newline_indent(int depth, AmkStrBuf *out) {
  amk_sb_putc(out, '\n');
  for (int i = 0; i < depth; i++)
    amk_sb_putn(out, "  ", 2);
}

/* Writers for the fixed-shape records: open, key, separators, close. Every
 * key is preceded by a newline at depth + 1 and followed by ": ". */
typedef struct {
  AmkStrBuf *out;
  int depth;  /* depth of the container itself */
  int count;  /* entries written so far */
  char close; /* '}' or ']' */
} Container;

static Container open_container(AmkStrBuf *out, int depth, char open) {
  amk_sb_putc(out, open);
  Container c = {out, depth, 0, open == '{' ? '}' : ']'};
  return c;
}

/* Starts the next entry of a container (separator and indentation). */
static void next_entry(Container *c) {
  if (c->count++ > 0)
    amk_sb_putc(c->out, ',');
  newline_indent(c->depth + 1, c->out);
}

static void key(Container *c, const char *name) {
  next_entry(c);
  amk_write_json_string(name, c->out);
  amk_sb_putn(c->out, ": ", 2);
}

/* One `"name": value` entry of an object. */
static void int_field(Container *c, const char *name, int64_t v) {
  key(c, name);
  put_int(v, c->out);
}

static void string_field(Container *c, const char *name, const char *s) {
  key(c, name);
  amk_write_json_string(s, c->out);
}

static void close_container(Container *c) {
  if (c->count > 0)
    newline_indent(c->depth, c->out);
  amk_sb_putc(c->out, c->close);
}

void amk_write_json_value(const AmkValue *v, int depth, AmkStrBuf *out) {
  switch (v->kind) {
  case AMK_VALUE_NULL:
    amk_sb_puts(out, "null");
    return;
  case AMK_VALUE_BOOL:
    put_bool(v->as.b, out);
    return;
  case AMK_VALUE_INT:
    put_int(v->as.i, out);
    return;
  case AMK_VALUE_FLOAT:
    put_float(v->as.f, out);
    return;
  case AMK_VALUE_STRING:
    amk_write_json_string(v->as.s, out);
    return;
  case AMK_VALUE_LIST: {
    Container c = open_container(out, depth, '[');
    for (uint32_t i = 0; i < v->count; i++) {
      next_entry(&c);
      amk_write_json_value(&v->as.items[i], depth + 1, out);
    }
    close_container(&c);
    return;
  }
  case AMK_VALUE_OBJECT: {
    Container c = open_container(out, depth, '{');
    for (uint32_t i = 0; i < v->count; i++) {
      key(&c, v->as.members[i].key);
      amk_write_json_value(&v->as.members[i].value, depth + 1, out);
    }
    close_container(&c);
    return;
  }
  }
  AMK_UNREACHABLE("bad AmkValue kind");
}

static void put_string_or_null(const char *s, AmkStrBuf *out) {
  if (s)
    amk_write_json_string(s, out);
  else
    amk_sb_puts(out, "null");
}

static void put_id_list(const int32_t *ids, uint32_t n, int depth, AmkStrBuf *out) {
  Container c = open_container(out, depth, '[');
  for (uint32_t i = 0; i < n; i++) {
    next_entry(&c);
    put_int(ids[i], out);
  }
  close_container(&c);
}

/* ---- records ----------------------------------------------------------------- */

/* Each record writer takes its record as `const void *` so that
 * amk_write_json can list and null-check them alike. */
typedef void (*WriteRecord)(const void *record, int depth, AmkStrBuf *out);

static void write_target(const void *record, int depth, AmkStrBuf *out) {
  const AmkTarget *t = record;
  Container c = open_container(out, depth, '{');
#define PUT_STR(field) put_string_or_null(t->field ? t->field : "", out)
#define PUT_INT(field) put_int(t->field, out)
#define PUT_FLOAT(field) put_float(t->field, out)
#define PUT_BOOL(field) put_bool(t->field, out)
#define X(field, kind)                                                         \
  key(&c, #field);                                                             \
  PUT_##kind(field);
  AMK_TARGET_FIELDS(X)
#undef X
#undef PUT_STR
#undef PUT_INT
#undef PUT_FLOAT
#undef PUT_BOOL
  close_container(&c);
}

static void write_buffer(const void *record, int depth, AmkStrBuf *out) {
  const AmkBuffer *b = record;
  Container c = open_container(out, depth, '{');
  int_field(&c, "id", b->id);
  string_field(&c, "name", b->name ? b->name : "");
  string_field(&c, "kind", amk_kind_json_name(b->kind));
  string_field(&c, "dtype", amk_dtype_json_name(b->dtype));
  key(&c, "shape");
  Container dims = open_container(out, depth + 1, '[');
  for (uint32_t i = 0; i < b->rank; i++) {
    next_entry(&dims);
    amk_write_json_value(&b->shape[i], depth + 2, out);
  }
  close_container(&dims);
  string_field(&c, "space", amk_space_json_name(b->space));
  key(&c, "source");
  put_string_or_null(b->source, out);
  close_container(&c);
}

static void write_counter(const void *record, int depth, AmkStrBuf *out) {
  const AmkCounter *k = record;
  Container c = open_container(out, depth, '{');
  int_field(&c, "id", k->id);
  int_field(&c, "init", k->init);
  string_field(&c, "note", k->note ? k->note : "");
  close_container(&c);
}

static void write_task(const void *record, int depth, AmkStrBuf *out) {
  const AmkTask *t = record;
  Container c = open_container(out, depth, '{');
  int_field(&c, "id", t->id);
  string_field(&c, "op", amk_op_info(t->op)->json_name);
  key(&c, "inputs");
  put_id_list(t->inputs, t->n_inputs, depth + 1, out);
  key(&c, "outputs");
  put_id_list(t->outputs, t->n_outputs, depth + 1, out);
  int_field(&c, "out_counter", t->out_counter);
  key(&c, "waits");
  Container waits = open_container(out, depth + 1, '[');
  for (uint32_t i = 0; i < t->n_waits; i++) {
    next_entry(&waits);
    Container w = open_container(out, depth + 2, '{');
    int_field(&w, "counter", t->waits[i].counter);
    key(&w, "threshold");
    amk_write_json_value(&t->waits[i].threshold, depth + 3, out);
    close_container(&w);
  }
  close_container(&waits);
  key(&c, "params");
  Container params = open_container(out, depth + 1, '{');
  for (uint32_t i = 0; i < t->n_params; i++) {
    key(&params, t->params[i].key);
    amk_write_json_value(&t->params[i].value, depth + 2, out);
  }
  close_container(&params);
  key(&c, "sm");
  if (t->has_sm)
    put_int(t->sm, out);
  else
    amk_sb_puts(out, "null");
  int_field(&c, "est_bytes", t->est_bytes);
  int_field(&c, "est_flops", t->est_flops);
  string_field(&c, "label", t->label ? t->label : "");
  close_container(&c);
}

static void write_pages(const void *record, int depth, AmkStrBuf *out) {
  const AmkPageAllocation *pa = record;
  Container c = open_container(out, depth, '{');
  key(&c, "buffer_to_page");
  Container map = open_container(out, depth + 1, '{');
  for (uint32_t i = 0; i < pa->n_bindings; i++) {
    /* Keys are the decimal buffer ids as strings (str(int) in Python). */
    next_entry(&map);
    amk_sb_printf(out, "\"%" PRId32 "\": ", pa->bindings[i].buffer);
    put_int(pa->bindings[i].page, out);
  }
  close_container(&map);
  key(&c, "pages");
  Container list = open_container(out, depth + 1, '[');
  for (uint32_t i = 0; i < pa->n_pages; i++) {
    const AmkPage *p = &pa->pages[i];
    next_entry(&list);
    Container page = open_container(out, depth + 2, '{');
    int_field(&page, "id", p->id);
    string_field(&page, "space", amk_space_json_name(p->space));
    int_field(&page, "nbytes", p->nbytes);
    int_field(&page, "live_start", p->live_start);
    int_field(&page, "live_end", p->live_end);
    close_container(&page);
  }
  close_container(&list);
  close_container(&c);
}

static void write_config(const void *record, int depth, AmkStrBuf *out) {
  const AmkConfig *cfg = record;
  Container c = open_container(out, depth, '{');
  key(&c, "tiling");
  amk_write_json_value(&cfg->tiling, depth + 1, out);
  key(&c, "fusion_grouping");
  amk_write_json_value(&cfg->fusion_grouping, depth + 1, out);
  key(&c, "sm_assignment");
  if (cfg->sm_assignment == AMK_SM_EXPLICIT) {
    Container map = open_container(out, depth + 1, '{');
    for (uint32_t i = 0; i < cfg->n_sm_map; i++) {
      next_entry(&map);
      amk_sb_printf(out, "\"%" PRId32 "\": ", cfg->sm_map[i].task);
      put_int(cfg->sm_map[i].sm, out);
    }
    close_container(&map);
  } else {
    amk_write_json_string(amk_sm_policy_name(cfg->sm_assignment), out);
  }
  int_field(&c, "pipelining_depth", cfg->pipelining_depth);
  string_field(&c, "page_allocation",
               amk_page_policy_name(cfg->page_allocation));
  int_field(&c, "threads_per_block", cfg->threads_per_block);
  int_field(&c, "smem_bytes_per_block", cfg->smem_bytes_per_block);
  close_container(&c);
}

/* `name`: the record at depth 1, or null. */
static void write_nullable(Container *top, const char *name, const void *record,
                           WriteRecord write) {
  key(top, name);
  if (record)
    write(record, 1, top->out);
  else
    amk_sb_puts(top->out, "null");
}

/* `name`: the list of n records of `size` bytes at depth 1. */
static void write_list(Container *top, const char *name, const void *records,
                       size_t size, uint32_t n, WriteRecord write) {
  key(top, name);
  Container list = open_container(top->out, 1, '[');
  for (uint32_t i = 0; i < n; i++) {
    next_entry(&list);
    write((const char *)records + i * size, 2, top->out);
  }
  close_container(&list);
}

/* The meta object, carrying the module's model folder as "model_dir" (the
 * reference has no place for it; `model` in the text form): in place of a
 * "model_dir" the meta already has, else as its last member. A
 * module read from JSON got its folder from that member, so its meta is
 * written back as it was read. */
static void write_meta(const AmkModule *m, AmkStrBuf *out) {
  const AmkValue *meta = &m->meta;
  if (!m->model_dir) {
    if (meta->kind == AMK_VALUE_NULL)
      amk_sb_puts(out, "{}"); /* a module built in memory: the reference's default */
    else
      amk_write_json_value(meta, 1, out);
    return;
  }
  uint32_t n = meta->kind == AMK_VALUE_OBJECT ? meta->count : 0;
  AmkMember *members = amk_xcalloc((size_t)n + 1, sizeof *members);
  if (n)
    memcpy(members, meta->as.members, n * sizeof *members);
  AmkValue dir = {.kind = AMK_VALUE_STRING};
  dir.as.s = m->model_dir;
  uint32_t at = n;
  for (uint32_t i = 0; i < n && at == n; i++)
    if (strcmp(members[i].key, AMK_JSON_MODEL_DIR_KEY) == 0)
      at = i;
  members[at] = (AmkMember){AMK_JSON_MODEL_DIR_KEY, dir};
  AmkValue with_dir = {.kind = AMK_VALUE_OBJECT, .count = at == n ? n + 1 : n};
  with_dir.as.members = members;
  amk_write_json_value(&with_dir, 1, out);
  free(members);
}

void amk_write_json(const AmkModule *m, AmkStrBuf *out) {
  Container top = open_container(out, 0, '{');
  string_field(&top, "ir_version",
               m->ir_version ? m->ir_version : AMK_IR_VERSION);
  string_field(&top, "abi_version",
               m->abi_version ? m->abi_version : AMK_ABI_VERSION);
  key(&top, "meta");
  write_meta(m, out);
  write_nullable(&top, "target", m->target, write_target);
  write_list(&top, "buffers", m->buffers, sizeof *m->buffers, m->n_buffers,
             write_buffer);
  write_list(&top, "counters", m->counters, sizeof *m->counters,
             m->n_counters, write_counter);
  write_list(&top, "tasks", m->tasks, sizeof *m->tasks, m->n_tasks, write_task);
  write_nullable(&top, "pages", m->pages, write_pages);
  write_nullable(&top, "config", m->config, write_config);
  close_container(&top);
}
