/* The `.amkir` reader: drives the Bison parser and builds records straight
 * into the module. Names are resolved after the whole file is read, so a
 * task may name a buffer or counter declared further down.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/builder.h"
#include "amk/strutil.h"
#include "parser.h"
#include "text_internal.h"

/* ---- small utilities ------------------------------------------------------ */

void amk_vec_init(AmkVec *v, size_t elem) {
  memset(v, 0, sizeof *v);
  v->elem = elem;
}

void amk_vec_free(AmkVec *v) {
  free(v->data);
  v->data = NULL;
  v->len = v->cap = 0;
}

void *amk_vec_push(AmkVec *v) {
  if (v->len == v->cap) {
    v->cap = v->cap ? v->cap * 2 : 16;
    v->data = amk_xrealloc(v->data, v->cap * v->elem);
  }
  void *slot = (char *)v->data + v->len * v->elem;
  memset(slot, 0, v->elem);
  v->len++;
  return slot;
}

void amk_text_error(AmkTextParser *p, AmkLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  amk_diag_v(p->diag, AMK_SEVERITY_ERROR, loc, fmt, ap);
  va_end(ap);
  p->failed = true;
}

void amk_text_open_value(AmkTextParser *p, AmkLoc loc) {
  /* Only the bracket that crosses the limit is reported: the ones inside it
   * would repeat the message hundreds of times. */
  if (++p->value_depth == AMK_VALUE_MAX_DEPTH + 1)
    amk_text_error(p, loc, "lists and objects nest deeper than %d levels here "
                   "(the most a value may nest, so that the program's JSON "
                   "can be read back)", AMK_VALUE_MAX_DEPTH);
}

void amk_text_close_value(AmkTextParser *p) { p->value_depth--; }

static void note(AmkTextParser *p, AmkLoc loc, const char *fmt, ...)
    AMK_PRINTF(3, 4);
static void note(AmkTextParser *p, AmkLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  amk_diag_v(p->diag, AMK_SEVERITY_NOTE, loc, fmt, ap);
  va_end(ap);
}

const char *amk_text_dup(AmkTextParser *p, AmkTextSlice s) {
  return amk_arena_strndup(&p->module->arena, s.ptr, s.len);
}

static bool slice_is(AmkTextSlice s, const char *word) {
  return strlen(word) == s.len && memcmp(s.ptr, word, s.len) == 0;
}

/* Looks a word up in a name table (tables.h text names). Words are copied
 * to a bounded buffer because slices are not NUL-terminated. */
static int lookup_word(AmkTextSlice word, int (*from_name)(const char *)) {
  char buf[64];
  if (word.len >= sizeof buf)
    return -1;
  memcpy(buf, word.ptr, word.len);
  buf[word.len] = 0;
  return from_name(buf);
}

/* "unknown dtype 'f23'; did you mean 'f32'?" or "...; expected one of ..." */
static void unknown_word(AmkTextParser *p, AmkLoc loc, const char *what,
                         AmkTextSlice word, const char *const *names,
                         size_t n) {
  const char *guess = amk_suggest(word.ptr, word.len, names, n);
  if (guess) {
    amk_text_error(p, loc, "unknown %s '%.*s'; did you mean '%s'?", what,
                   (int)word.len, word.ptr, guess);
    return;
  }
  char list[512];
  size_t len = 0;
  list[0] = 0;
  for (size_t i = 0; i < n && len + 1 < sizeof list; i++) {
    int w = snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                     names[i]);
    if (w < 0)
      break;
    len += (size_t)w;
  }
  amk_text_error(p, loc, "unknown %s '%.*s' (expected one of: %s)", what,
                 (int)word.len, word.ptr, list);
}

static const char *const dtype_names[] = {
#define X(name, code, text, bits) text,
    AMK_DTYPES(X)
#undef X
};
static const char *const kind_names[] = {
#define X(name, code, text, ro) text,
    AMK_BUFFER_KINDS(X)
#undef X
};
static const char *const space_names[] = {
#define X(name, code, text, onchip) text,
    AMK_MEMSPACES(X)
#undef X
};
static const char *const op_names[] = {
#define X(name, code, text, mi, ma, no, req) text,
    AMK_OPS(X)
#undef X
};
static const char *const page_policy_names[] = {
#define X(name, text) text,
    AMK_PAGE_POLICIES(X)
#undef X
};

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static bool id_fits(AmkTextParser *p, int64_t id, AmkLoc loc,
                    const char *what) {
  if (id < INT32_MIN || id > INT32_MAX) {
    amk_text_error(p, loc, "%s %lld is out of range (32-bit)", what,
                   (long long)id);
    return false;
  }
  return true;
}

/* ---- header, model, meta ------------------------------------------------ */

void amk_text_set_versions(AmkTextParser *p, const char *ir, AmkLoc ir_loc,
                           const char *abi, AmkLoc abi_loc) {
  if (!amk_same_major_version(ir, AMK_IR_VERSION))
    amk_text_error(p, ir_loc, "IR major version mismatch: file %s vs runtime %s",
                   ir, AMK_IR_VERSION);
  if (!amk_same_major_version(abi, AMK_ABI_VERSION))
    amk_text_error(p, abi_loc,
                   "ABI major version mismatch: file %s vs runtime %s", abi,
                   AMK_ABI_VERSION);
  p->module->ir_version = ir;
  p->module->abi_version = abi;
}

static bool once(AmkTextParser *p, bool *seen, AmkLoc at, const char *what) {
  if (*seen) {
    amk_text_error(p, at, "'%s' is given more than once", what);
    return false;
  }
  *seen = true;
  return true;
}

void amk_text_set_model(AmkTextParser *p, const char *dir, AmkLoc at) {
  if (once(p, &p->seen_model, at, "model"))
    p->module->model_dir = dir;
}

void amk_text_set_meta(AmkTextParser *p, AmkValue meta, AmkLoc at,
                       AmkLoc value_at) {
  if (!once(p, &p->seen_meta, at, "meta"))
    return;
  /* The reference's meta is a dict, and the JSON reader refuses anything
   * else: accepting it here would write JSON that cannot be read back. */
  if (meta.kind != AMK_VALUE_OBJECT) {
    amk_text_error(p, value_at, "meta must be an object ({key = value, ...})");
    return;
  }
  p->module->meta = meta;
}

/* ---- target ---------------------------------------------------------------- */

static const char *const target_field_names[] = {
#define X(field, kind) #field,
    AMK_TARGET_FIELDS(X)
#undef X
};

void amk_text_begin_target(AmkTextParser *p, const char *name, AmkLoc at) {
  once(p, &p->seen_target, at, "target");
  p->target = amk_arena_alloc(&p->module->arena, sizeof *p->target);
  p->target->name = name;
  p->target->supports_cooperative = true;
  p->target->note = "";
  p->target_loc = at;
  p->target_fields_seen = 1u; /* the name */
  p->target_has_block = false;
}

static bool want_int(AmkTextParser *p, const char *key, const AmkValue *v,
                     AmkLoc loc, int64_t *out) {
  if (v->kind == AMK_VALUE_INT) {
    *out = v->as.i;
    return true;
  }
  amk_text_error(p, loc, "'%s' must be an integer", key);
  return false;
}

static void set_target_INT(AmkTextParser *p, const char *key, int64_t *field,
                           const AmkValue *v, AmkLoc loc) {
  want_int(p, key, v, loc, field);
}
static void set_target_FLOAT(AmkTextParser *p, const char *key, double *field,
                             const AmkValue *v, AmkLoc loc) {
  if (!amk_value_as_real(v, field))
    amk_text_error(p, loc, "'%s' must be a number", key);
}
static void set_target_BOOL(AmkTextParser *p, const char *key, bool *field,
                            const AmkValue *v, AmkLoc loc) {
  if (v->kind == AMK_VALUE_BOOL)
    *field = v->as.b;
  else
    amk_text_error(p, loc, "'%s' must be true or false", key);
}
static void set_target_STR(AmkTextParser *p, const char *key,
                           const char **field, const AmkValue *v, AmkLoc loc) {
  if (field == &p->target->name) {
    amk_text_error(p, loc, "the target's name is written after 'target', not "
                           "as a field");
  } else if (v->kind == AMK_VALUE_STRING) {
    *field = v->as.s;
  } else {
    amk_text_error(p, loc, "'%s' must be a string", key);
  }
}

void amk_text_target_field(AmkTextParser *p, const char *key, AmkLoc key_loc,
                           const AmkValue *value, AmkLoc value_loc) {
  AmkTarget *t = p->target;
  uint32_t index = 0;
#define X(field, kind)                                                         \
  if (strcmp(key, #field) == 0) {                                              \
    if (strcmp(key, "name") != 0 && (p->target_fields_seen >> index) & 1u) {   \
      amk_text_error(p, key_loc, "target field '%s' is given twice", key);     \
      return;                                                                  \
    }                                                                          \
    p->target_fields_seen |= 1u << index;                                      \
    set_target_##kind(p, key, &t->field, value, value_loc);                    \
    return;                                                                    \
  }                                                                            \
  index++;
  AMK_TARGET_FIELDS(X)
#undef X
  AmkTextSlice word = {key, strlen(key)};
  unknown_word(p, key_loc, "target field", word, target_field_names + 1,
               COUNT_OF(target_field_names) - 1);
}

void amk_text_end_target(AmkTextParser *p) {
  AmkTarget *t = p->target;
  if (!p->target_has_block) {
    const AmkTarget *builtin = amk_builtin_target(t->name);
    if (builtin) {
      *t = *builtin;
    } else {
      char list[256];
      size_t len = 0;
      list[0] = 0;
      for (size_t i = 0; i < amk_builtin_target_count(); i++) {
        int w = snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                         amk_builtin_target_at(i)->name);
        if (w < 0 || (size_t)w >= sizeof list - len)
          break;
        len += (size_t)w;
      }
      amk_text_error(p, p->target_loc,
                     "unknown target '%s' (built-in targets: %s); give its "
                     "fields in a '{...}' block",
                     t->name, list);
    }
  } else {
    char missing[512];
    size_t len = 0;
    missing[0] = 0;
    for (uint32_t i = 1; i < AMK_TARGET_REQUIRED_FIELDS; i++) {
      if ((p->target_fields_seen >> i) & 1u)
        continue;
      int w = snprintf(missing + len, sizeof missing - len, "%s%s",
                       len ? ", " : "", target_field_names[i]);
      if (w < 0 || (size_t)w >= sizeof missing - len)
        break;
      len += (size_t)w;
    }
    if (len)
      amk_text_error(p, p->target_loc, "target '%s' is missing required "
                     "fields: %s", t->name, missing);
  }
  p->module->target = t;
}

/* ---- config ---------------------------------------------------------------- */

static const char *const config_field_names[] = {
    "tiling",          "fusion_grouping",   "sm_assignment",
    "pipelining_depth", "page_allocation",  "threads_per_block",
    "smem_bytes_per_block",
};

void amk_text_begin_config(AmkTextParser *p, AmkLoc at) {
  once(p, &p->seen_config, at, "config");
  p->module->config = amk_config_new_default(p->module);
  p->config_fields_seen = 0;
}

/* Strict decimal (an sm map key must name a task id). */
static bool parse_key_int(const char *s, int64_t *out) {
  char *end;
  if (!*s || !((*s >= '0' && *s <= '9') || *s == '-'))
    return false;
  long long v = strtoll(s, &end, 10);
  if (*end)
    return false;
  *out = v;
  return true;
}

static void set_sm_assignment(AmkTextParser *p, AmkConfig *c,
                              const AmkTextFieldValue *v, AmkLoc loc) {
  if (v->is_word) {
    if (slice_is(v->word, "load_balance")) {
      c->sm_assignment = AMK_SM_LOAD_BALANCE;
    } else if (slice_is(v->word, "round_robin")) {
      c->sm_assignment = AMK_SM_ROUND_ROBIN;
    } else {
      static const char *const words[] = {"load_balance", "round_robin"};
      unknown_word(p, loc, "sm_assignment policy", v->word, words, 2);
    }
    return;
  }
  if (v->value.kind != AMK_VALUE_OBJECT) {
    amk_text_error(p, loc, "sm_assignment must be load_balance, round_robin "
                           "or an object {<task id> = <sm>, ...}");
    return;
  }
  c->sm_assignment = AMK_SM_EXPLICIT;
  c->n_sm_map = v->value.count;
  c->sm_map =
      amk_arena_alloc(&p->module->arena, (v->value.count + 1) * sizeof *c->sm_map);
  for (uint32_t i = 0; i < v->value.count; i++) {
    const AmkMember *member = &v->value.as.members[i];
    int64_t task, sm;
    if (!parse_key_int(member->key, &task) || task < INT32_MIN ||
        task > INT32_MAX) {
      amk_text_error(p, loc, "sm_assignment key '%s' is not a task id",
                     member->key);
      return;
    }
    if (member->value.kind != AMK_VALUE_INT ||
        !amk_value_as_int(&member->value, &sm) || sm < INT32_MIN ||
        sm > INT32_MAX) {
      amk_text_error(p, loc, "sm_assignment of task %lld must be an integer",
                     (long long)task);
      return;
    }
    c->sm_map[i].task = (int32_t)task;
    c->sm_map[i].sm = (int32_t)sm;
  }
}

void amk_text_config_field(AmkTextParser *p, const char *key, AmkLoc key_loc,
                           const AmkTextFieldValue *v, AmkLoc loc) {
  AmkConfig *c = p->module->config;
  size_t index = 0;
  while (index < COUNT_OF(config_field_names) &&
         strcmp(config_field_names[index], key) != 0)
    index++;
  if (index == COUNT_OF(config_field_names)) {
    AmkTextSlice word = {key, strlen(key)};
    unknown_word(p, key_loc, "config field", word, config_field_names,
                 COUNT_OF(config_field_names));
    return;
  }
  if ((p->config_fields_seen >> index) & 1u) {
    amk_text_error(p, key_loc, "config field '%s' is given twice", key);
    return;
  }
  p->config_fields_seen |= 1u << index;
  if (index == 2) {
    set_sm_assignment(p, c, v, loc);
    return;
  }
  if (index == 4) {
    int policy = v->is_word ? lookup_word(v->word, amk_page_policy_from_name) : -1;
    if (policy >= 0)
      c->page_allocation = (AmkPagePolicy)policy;
    else if (v->is_word)
      unknown_word(p, loc, "page_allocation policy", v->word,
                   page_policy_names, COUNT_OF(page_policy_names));
    else
      amk_text_error(p, loc, "page_allocation must be one of linear, "
                             "graph_color, none");
    return;
  }
  if (v->is_word) {
    amk_text_error(p, loc, "'%s' takes a value, not the word '%.*s'", key,
                   (int)v->word.len, v->word.ptr);
    return;
  }
  switch (index) {
  case 0: c->tiling = v->value; break;
  case 1: c->fusion_grouping = v->value; break;
  case 3: want_int(p, key, &v->value, loc, &c->pipelining_depth); break;
  case 5: want_int(p, key, &v->value, loc, &c->threads_per_block); break;
  case 6: want_int(p, key, &v->value, loc, &c->smem_bytes_per_block); break;
  default: AMK_UNREACHABLE("config field index");
  }
}

/* ---- buffers and counters ------------------------------------------------- */

/* How a name is written in messages: `%name` or `%"odd name"`. */
static void format_ref_name(char sigil, AmkTextSlice name, char *buf,
                            size_t size) {
  int shown = name.len > 200 ? 200 : (int)name.len;
  if (amk_text_is_identifier(name.ptr, name.len))
    snprintf(buf, size, "%c%.*s", sigil, shown, name.ptr);
  else
    snprintf(buf, size, "%c\"%.*s\"", sigil, shown, name.ptr);
}

/* Registers a declared name. A second declaration of a name is an error
 * unless it carries an explicit id: that is how the printer writes modules
 * (read from JSON) whose names repeat, and references to such names must
 * then use ids. */
static void declare_name(AmkTextParser *p, AmkNameMap *map, char sigil,
                         const char *what, const char *name, size_t len,
                         int32_t index, bool explicit_id, AmkLoc loc,
                         AmkLoc first_loc_of(const AmkModule *, int32_t)) {
  AmkNameSlot *slot = amk_name_map_add(map, name, len, index);
  if (slot->count > 1 && !explicit_id) {
    char shown[256];
    AmkTextSlice s = {name, len};
    format_ref_name(sigil, s, shown, sizeof shown);
    amk_text_error(p, loc, "duplicate %s name '%s'", what, shown);
    note(p, first_loc_of(p->module, slot->index),
         "'%s' was first declared here", shown);
  }
}

static AmkLoc buffer_loc(const AmkModule *m, int32_t index) {
  return m->buffers[index].loc;
}
static AmkLoc counter_loc(const AmkModule *m, int32_t index) {
  return m->counters[index].loc;
}

void amk_text_add_buffer(AmkTextParser *p, AmkLoc at, const int64_t *id,
                         AmkLoc id_loc, AmkTextRef name, AmkLoc name_loc,
                         AmkTextSlice dtype, AmkLoc dtype_loc, AmkValue dims,
                         AmkTextSlice kind, AmkLoc kind_loc, AmkTextSlice space,
                         AmkLoc space_loc, const char *source) {
  AmkModule *m = p->module;
  int32_t index = (int32_t)m->n_buffers;
  AmkBuffer *b = amk_module_add_buffer(m);
  b->loc = at;
  b->id = index;
  if (id && id_fits(p, *id, id_loc, "buffer id"))
    b->id = (int32_t)*id;
  if (name.by_id) {
    amk_text_error(p, name_loc, "a buffer declaration needs a name, not an "
                                "id (write the id before the name: "
                                "'buffer %lld %%name')",
                   (long long)name.id);
    name.name.ptr = "";
    name.name.len = 0;
  }
  b->name = amk_text_dup(p, name.name);
  declare_name(p, &p->buffer_names, '%', "buffer", b->name, name.name.len,
               index, id != NULL, name_loc, buffer_loc);

  int code = lookup_word(dtype, amk_dtype_from_text_name);
  if (code < 0)
    unknown_word(p, dtype_loc, "dtype", dtype, dtype_names,
                 COUNT_OF(dtype_names));
  b->dtype = code < 0 ? AMK_DTYPE_F32 : (AmkDType)code;
  b->rank = dims.count;
  b->shape = dims.as.items;

  code = lookup_word(kind, amk_kind_from_text_name);
  if (code < 0)
    unknown_word(p, kind_loc, "buffer kind", kind, kind_names,
                 COUNT_OF(kind_names));
  b->kind = code < 0 ? AMK_KIND_ACTIVATION : (AmkBufferKind)code;

  b->space = AMK_SPACE_HBM;
  if (space.len) {
    code = lookup_word(space, amk_space_from_text_name);
    if (code < 0)
      unknown_word(p, space_loc, "memory space", space, space_names,
                   COUNT_OF(space_names));
    else
      b->space = (AmkMemSpace)code;
  }
  b->source = source;
}

void amk_text_add_counter(AmkTextParser *p, AmkLoc at, const int64_t *id,
                          AmkLoc id_loc, AmkTextRef name, AmkLoc name_loc,
                          const char *note_text, int64_t init) {
  AmkModule *m = p->module;
  int32_t index = (int32_t)m->n_counters;
  AmkCounter *c = amk_module_add_counter(m);
  c->loc = at;
  c->id = index;
  c->note = note_text;
  c->init = init;
  if (name.by_id) {
    /* `counter #5`: an unnamed counter whose id is 5 */
    if (id)
      amk_text_error(p, id_loc, "an unnamed counter's id is written once, "
                                "as '#<id>'");
    c->id = (int32_t)name.id;
    return;
  }
  if (id && id_fits(p, *id, id_loc, "counter id"))
    c->id = (int32_t)*id;
  c->name = amk_text_dup(p, name.name);
  declare_name(p, &p->counter_names, '#', "counter", c->name, name.name.len,
               index, id != NULL, name_loc, counter_loc);
}

/* ---- tasks ----------------------------------------------------------------- */

void amk_text_begin_task(AmkTextParser *p, AmkLoc at, int64_t id, AmkLoc id_loc,
                         AmkTextSlice op, AmkLoc op_loc) {
  memset(&p->task, 0, sizeof p->task);
  p->task.at = at;
  p->task.id = id;
  p->task.id_loc = id_loc;
  p->task.op = op;
  p->task.op_loc = op_loc;
  p->task.label = "";
}

void amk_text_push_ref(AmkTextParser *p, AmkTextRef ref, AmkLoc at) {
  AmkTextRefAt *slot = amk_vec_push(&p->refs);
  slot->ref = ref;
  slot->loc = at;
}

void amk_text_push_wait(AmkTextParser *p, AmkTextRef ref, AmkLoc at,
                        AmkValue threshold) {
  AmkTextWait *slot = amk_vec_push(&p->waits);
  slot->ref.ref = ref;
  slot->ref.loc = at;
  slot->threshold = threshold;
}

/* Stores an id now, or remembers the name to resolve at the end. */
static int32_t refer(AmkTextParser *p, const AmkTextRefAt *r,
                     AmkPendingKind kind, uint32_t record, uint32_t slot) {
  if (r->ref.by_id)
    return (int32_t)r->ref.id;
  AmkPendingRef *pending = amk_vec_push(&p->pending);
  pending->kind = kind;
  pending->record = record;
  pending->slot = slot;
  pending->name = r->ref.name;
  pending->loc = r->loc;
  return -1;
}

static int32_t *take_refs(AmkTextParser *p, size_t from, size_t to,
                          AmkPendingKind kind, uint32_t task_index) {
  if (from == to)
    return NULL;
  int32_t *ids = amk_arena_alloc(&p->module->arena, (to - from) * sizeof *ids);
  for (size_t i = from; i < to; i++)
    ids[i - from] = refer(p, &AMK_VEC_AT(&p->refs, AmkTextRefAt, i), kind,
                          task_index, (uint32_t)(i - from));
  return ids;
}

void amk_text_end_task(AmkTextParser *p) {
  AmkTextTask *syntax = &p->task;
  AmkModule *m = p->module;
  uint32_t index = m->n_tasks;
  AmkTask *t = amk_module_add_task(m);
  t->loc = syntax->at;
  if (id_fits(p, syntax->id, syntax->id_loc, "task id"))
    t->id = (int32_t)syntax->id;

  int op = lookup_word(syntax->op, amk_op_from_text_name);
  if (op < 0)
    unknown_word(p, syntax->op_loc, "op", syntax->op, op_names,
                 COUNT_OF(op_names));
  t->op = op < 0 ? AMK_OP_NOP : (AmkOp)op;

  t->n_inputs = (uint32_t)(syntax->outputs_mark - syntax->inputs_mark);
  t->inputs = take_refs(p, syntax->inputs_mark, syntax->outputs_mark,
                        AMK_PENDING_INPUT, index);
  t->n_outputs = (uint32_t)(p->refs.len - syntax->outputs_mark);
  t->outputs = take_refs(p, syntax->outputs_mark, p->refs.len,
                         AMK_PENDING_OUTPUT, index);
  p->refs.len = syntax->inputs_mark;

  t->n_waits = (uint32_t)(p->waits.len - syntax->waits_mark);
  if (t->n_waits)
    t->waits = amk_arena_alloc(&m->arena, t->n_waits * sizeof *t->waits);
  for (uint32_t i = 0; i < t->n_waits; i++) {
    const AmkTextWait *w =
        &AMK_VEC_AT(&p->waits, AmkTextWait, syntax->waits_mark + i);
    t->waits[i].counter = refer(p, &w->ref, AMK_PENDING_WAIT, index, i);
    t->waits[i].threshold = w->threshold;
  }
  p->waits.len = syntax->waits_mark;

  AmkTextRefAt signal = {syntax->signal, syntax->signal_loc};
  t->out_counter = refer(p, &signal, AMK_PENDING_SIGNAL, index, 0);

  if (syntax->params.kind == AMK_VALUE_OBJECT && syntax->params.count) {
    t->n_params = syntax->params.count;
    t->params = amk_arena_alloc(&m->arena, t->n_params * sizeof *t->params);
    for (uint32_t i = 0; i < t->n_params; i++) {
      t->params[i].key = syntax->params.as.members[i].key;
      t->params[i].value = syntax->params.as.members[i].value;
    }
  }
  if (syntax->has_sm && id_fits(p, syntax->sm, syntax->sm_loc, "sm")) {
    t->has_sm = true;
    t->sm = (int32_t)syntax->sm;
  }
  t->est_bytes = syntax->est_bytes;
  t->est_flops = syntax->est_flops;
  t->label = syntax->label;
}

/* ---- values ----------------------------------------------------------------- */

void amk_text_push_value(AmkTextParser *p, AmkValue v) {
  *(AmkValue *)amk_vec_push(&p->values) = v;
}

AmkValue amk_text_make_list(AmkTextParser *p, size_t mark) {
  AmkValue list = {.kind = AMK_VALUE_LIST};
  list.count = (uint32_t)(p->values.len - mark);
  if (list.count)
    list.as.items = amk_arena_memdup(&p->module->arena,
                                     &AMK_VEC_AT(&p->values, AmkValue, mark),
                                     list.count * sizeof(AmkValue));
  p->values.len = mark;
  return list;
}

void amk_text_push_member(AmkTextParser *p, const char *key, AmkLoc at,
                          AmkValue v) {
  AmkTextMember *member = amk_vec_push(&p->members);
  member->key = key;
  member->loc = at;
  member->value = v;
}

static int compare_members_by_key(const void *a, const void *b) {
  const AmkTextMember *const *x = a, *const *y = b;
  int c = strcmp((*x)->key, (*y)->key);
  if (c)
    return c;
  /* equal keys: the earlier one first, so the error lands on the later */
  return *x < *y ? -1 : *x > *y;
}

AmkValue amk_text_make_object(AmkTextParser *p, size_t mark) {
  AmkValue object = {.kind = AMK_VALUE_OBJECT};
  object.count = (uint32_t)(p->members.len - mark);
  /* No members may mean no storage yet: NULL plus an offset is undefined. */
  AmkTextMember *members =
      object.count ? &AMK_VEC_AT(&p->members, AmkTextMember, mark) : NULL;
  if (object.count > 1) {
    /* duplicate keys: sort pointers (n log n; meta objects can be large) */
    const AmkTextMember **sorted =
        amk_xmalloc(object.count * sizeof *sorted);
    for (uint32_t i = 0; i < object.count; i++)
      sorted[i] = &members[i];
    qsort(sorted, object.count, sizeof *sorted, compare_members_by_key);
    for (uint32_t i = 1; i < object.count; i++)
      if (strcmp(sorted[i - 1]->key, sorted[i]->key) == 0)
        amk_text_error(p, sorted[i]->loc, "duplicate key '%s'", sorted[i]->key);
    free(sorted);
  }
  if (object.count) {
    object.as.members = amk_arena_alloc(
        &p->module->arena, object.count * sizeof *object.as.members);
    for (uint32_t i = 0; i < object.count; i++) {
      object.as.members[i].key = members[i].key;
      object.as.members[i].value = members[i].value;
    }
  }
  p->members.len = mark;
  return object;
}

/* ---- pages ----------------------------------------------------------------- */

void amk_text_begin_pages(AmkTextParser *p, AmkLoc at) {
  once(p, &p->seen_pages, at, "pages");
  p->pages_loc = at;
  p->pages.len = 0;
  p->bindings.len = 0;
}

void amk_text_add_page(AmkTextParser *p, int64_t id, AmkLoc id_loc,
                       AmkTextSlice space, AmkLoc space_loc, int64_t nbytes,
                       int64_t live_start, int64_t live_end) {
  AmkPage *page = amk_vec_push(&p->pages);
  if (id_fits(p, id, id_loc, "page id"))
    page->id = (int32_t)id;
  int code = lookup_word(space, amk_space_from_text_name);
  if (code < 0)
    unknown_word(p, space_loc, "memory space", space, space_names,
                 COUNT_OF(space_names));
  page->space = code < 0 ? AMK_SPACE_HBM : (AmkMemSpace)code;
  page->nbytes = nbytes;
  page->live_start = live_start;
  page->live_end = live_end;
}

void amk_text_add_binding(AmkTextParser *p, AmkTextRef buffer, AmkLoc at,
                          int64_t page, AmkLoc page_loc) {
  uint32_t index = (uint32_t)p->bindings.len;
  AmkPageBinding *binding = amk_vec_push(&p->bindings);
  if (id_fits(p, page, page_loc, "page id"))
    binding->page = (int32_t)page;
  AmkTextRefAt ref = {buffer, at};
  binding->buffer = refer(p, &ref, AMK_PENDING_BINDING, index, 0);
}

void amk_text_end_pages(AmkTextParser *p) {
  AmkArena *arena = &p->module->arena;
  AmkPageAllocation *alloc = amk_arena_alloc(arena, sizeof *alloc);
  alloc->n_pages = (uint32_t)p->pages.len;
  alloc->n_bindings = (uint32_t)p->bindings.len;
  if (alloc->n_pages)
    alloc->pages =
        amk_arena_memdup(arena, p->pages.data, p->pages.len * sizeof(AmkPage));
  if (alloc->n_bindings)
    alloc->bindings = amk_arena_memdup(
        arena, p->bindings.data, p->bindings.len * sizeof(AmkPageBinding));
  p->module->pages = alloc;
}

/* ---- name resolution --------------------------------------------------------- */

static void resolve_names(AmkTextParser *p) {
  AmkModule *m = p->module;
  for (size_t i = 0; i < p->pending.len; i++) {
    const AmkPendingRef *r = &AMK_VEC_AT(&p->pending, AmkPendingRef, i);
    bool is_counter =
        r->kind == AMK_PENDING_SIGNAL || r->kind == AMK_PENDING_WAIT;
    const AmkNameMap *map = is_counter ? &p->counter_names : &p->buffer_names;
    const AmkNameSlot *slot = amk_name_map_find(map, r->name.ptr, r->name.len);
    char shown[256];
    format_ref_name(is_counter ? '#' : '%', r->name, shown, sizeof shown);
    const char *what = is_counter ? "counter" : "buffer";
    if (!slot) {
      amk_text_error(p, r->loc, "undefined %s '%s'", what, shown);
      continue;
    }
    if (slot->count > 1) {
      amk_text_error(p, r->loc,
                     "%s name '%s' is declared more than once; refer to the "
                     "%s by its id",
                     what, shown, what);
      continue;
    }
    int32_t id = is_counter ? m->counters[slot->index].id
                            : m->buffers[slot->index].id;
    switch (r->kind) {
    case AMK_PENDING_INPUT: m->tasks[r->record].inputs[r->slot] = id; break;
    case AMK_PENDING_OUTPUT: m->tasks[r->record].outputs[r->slot] = id; break;
    case AMK_PENDING_SIGNAL: m->tasks[r->record].out_counter = id; break;
    case AMK_PENDING_WAIT:
      m->tasks[r->record].waits[r->slot].counter = id;
      break;
    case AMK_PENDING_BINDING:
      /* bindings are in the arena already; a repeated `pages` block (an
       * error reported earlier) may have replaced the one this names */
      if (m->pages && r->record < m->pages->n_bindings)
        m->pages->bindings[r->record].buffer = id;
      break;
    }
  }
}

/* ---- the entry point ---------------------------------------------------------- */

void amk_text_parser_init(AmkTextParser *p, const char *name, const char *text, size_t len,
                          AmkDiagEngine *diag) {
  memset(p, 0, sizeof *p);
  /* a private copy whose final NUL is the lexer's sentinel */
  char *copy = amk_xmalloc(len + 1);
  if (len)
    memcpy(copy, text, len);
  copy[len] = 0;
  p->copy = copy;
  p->cursor = p->line_start = (const unsigned char *)copy;
  p->limit = (const unsigned char *)copy + len;
  p->line = 1;
  p->diag = diag;
  p->module = amk_module_new();
  p->module->source_name = name;
  p->module->source_text = text;
  p->module->source_len = len;
  amk_vec_init(&p->values, sizeof(AmkValue));
  amk_vec_init(&p->members, sizeof(AmkTextMember));
  amk_vec_init(&p->refs, sizeof(AmkTextRefAt));
  amk_vec_init(&p->waits, sizeof(AmkTextWait));
  amk_vec_init(&p->pending, sizeof(AmkPendingRef));
  amk_vec_init(&p->pages, sizeof(AmkPage));
  amk_vec_init(&p->bindings, sizeof(AmkPageBinding));
}

AmkModule *amk_text_parser_finish(AmkTextParser *p, int parse_status) {
  if (parse_status == 0)
    resolve_names(p);
  amk_vec_free(&p->values);
  amk_vec_free(&p->members);
  amk_vec_free(&p->refs);
  amk_vec_free(&p->waits);
  amk_vec_free(&p->pending);
  amk_vec_free(&p->pages);
  amk_vec_free(&p->bindings);
  amk_name_map_free(&p->buffer_names);
  amk_name_map_free(&p->counter_names);
  free(p->copy);
  p->copy = NULL;
  if (parse_status != 0 || p->failed) {
    amk_module_free(p->module);
    return NULL;
  }
  return p->module;
}
