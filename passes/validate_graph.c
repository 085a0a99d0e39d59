/* Id indexes and the bipartite task graph shared by verify, validate and the
 * simulators (see validate_graph.h). */
#include "validate_graph.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/diag.h"

/* ---- scratch memory ----------------------------------------------------- */

struct AmkScratchBlock {
  AmkScratchBlock *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
};

static AmkScratchBlock *scratch_block(size_t size) {
  AmkScratchBlock *b = amk_xmalloc(sizeof *b + size);
  b->next = NULL;
  b->size = size;
  b->used = 0;
  return b;
}

void *amk_scratch_alloc(AmkScratch *s, size_t size) {
  size = (size + 15) & ~(size_t)15;
  if (size == 0)
    size = 16;
  AmkScratchBlock *b = s->head;
  if (!b || b->size - b->used < size) {
    size_t want = s->total > size ? s->total : size;
    if (want < 16384)
      want = 16384;
    b = scratch_block(want);
    b->next = s->head;
    s->head = b;
    s->total += want;
  }
  void *p = b->data + b->used;
  b->used += size;
  s->used_total += size;
  return p;
}

void *amk_scratch_calloc(AmkScratch *s, size_t n, size_t size) {
  AMK_ASSERT(size == 0 || n <= SIZE_MAX / size);
  void *p = amk_scratch_alloc(s, n * size);
  memset(p, 0, n * size);
  return p;
}

void amk_scratch_reset(AmkScratch *s, size_t hint) {
  size_t want = s->used_total > hint ? s->used_total : hint;
  if (s->head && (s->head->next || s->head->size < want)) {
    amk_scratch_free(s);
    s->head = scratch_block(want);
    s->total = want;
  } else if (!s->head && want) {
    s->head = scratch_block(want);
    s->total = want;
  }
  if (s->head)
    s->head->used = 0;
  s->used_total = 0;
}

void amk_scratch_free(AmkScratch *s) {
  for (AmkScratchBlock *b = s->head, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  s->head = NULL;
  s->total = s->used_total = 0;
}

/* ---- id map ------------------------------------------------------------- */

static uint32_t hash_id(int32_t key) {
  uint32_t x = (uint32_t)key;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

void amk_idmap_init_in(AmkIdMap *map, size_t expected, AmkScratch *scratch) {
  uint32_t cap = 16;
  while (cap < expected * 2 + 2) {
    AMK_ASSERT(cap < (1u << 31));
    cap <<= 1;
  }
  map->cap = cap;
  map->count = 0;
  map->scratch = scratch;
  if (scratch) {
    map->keys = amk_scratch_alloc(scratch, sizeof *map->keys * cap);
    map->vals = amk_scratch_alloc(scratch, sizeof *map->vals * cap);
  } else {
    map->keys = amk_xmalloc(sizeof *map->keys * cap);
    map->vals = amk_xmalloc(sizeof *map->vals * cap);
  }
  memset(map->vals, 0xff, sizeof *map->vals * cap);
}

void amk_idmap_init(AmkIdMap *map, size_t expected) {
  amk_idmap_init_in(map, expected, NULL);
}

void amk_idmap_free(AmkIdMap *map) {
  if (!map->scratch) {
    free(map->keys);
    free(map->vals);
  }
  map->keys = NULL;
  map->vals = NULL;
  map->cap = map->count = 0;
}

uint32_t amk_idmap_get(const AmkIdMap *map, int32_t key) {
  if (map->cap == 0)
    return AMK_NO_INDEX;
  uint32_t mask = map->cap - 1;
  for (uint32_t i = hash_id(key) & mask;; i = (i + 1) & mask) {
    if (map->vals[i] == AMK_NO_INDEX)
      return AMK_NO_INDEX;
    if (map->keys[i] == key)
      return map->vals[i];
  }
}

static void idmap_grow(AmkIdMap *map) {
  AmkIdMap bigger;
  amk_idmap_init_in(&bigger, (size_t)map->cap, map->scratch);
  for (uint32_t i = 0; i < map->cap; i++)
    if (map->vals[i] != AMK_NO_INDEX)
      amk_idmap_put(&bigger, map->keys[i], map->vals[i]);
  amk_idmap_free(map);
  *map = bigger;
}

uint32_t amk_idmap_put(AmkIdMap *map, int32_t key, uint32_t val) {
  AMK_ASSERT(val != AMK_NO_INDEX);
  if (map->cap == 0)
    amk_idmap_init_in(map, 8, map->scratch);
  if ((map->count + 1) * 2 > map->cap)
    idmap_grow(map);
  uint32_t mask = map->cap - 1;
  for (uint32_t i = hash_id(key) & mask;; i = (i + 1) & mask) {
    if (map->vals[i] == AMK_NO_INDEX) {
      map->keys[i] = key;
      map->vals[i] = val;
      map->count++;
      return val;
    }
    if (map->keys[i] == key)
      return map->vals[i];
  }
}

void amk_id_index_build(AmkIdIndex *ix, const void *records, size_t stride,
                        uint32_t n) {
  amk_id_index_build_in(ix, records, stride, n, NULL);
}

void amk_id_index_build_in(AmkIdIndex *ix, const void *records, size_t stride,
                           uint32_t n, AmkScratch *scratch) {
  memset(ix, 0, sizeof *ix);
  ix->n = n;
  ix->identity = true;
  const char *base = records;
  for (uint32_t i = 0; i < n; i++) {
    int32_t id;
    memcpy(&id, base + (size_t)i * stride, sizeof id);
    if (id != (int32_t)i) {
      ix->identity = false;
      break;
    }
  }
  if (ix->identity)
    return;
  amk_idmap_init_in(&ix->map, n, scratch);
  for (uint32_t i = 0; i < n; i++) {
    int32_t id;
    memcpy(&id, base + (size_t)i * stride, sizeof id);
    if (amk_idmap_put(&ix->map, id, i) != i)
      ix->n_duplicates++;
  }
}

void amk_id_index_free(AmkIdIndex *ix) {
  if (!ix->identity)
    amk_idmap_free(&ix->map);
}

/* ---- the task graph ----------------------------------------------------- */

static void *graph_alloc(AmkTaskGraph *g, size_t size) {
  return g->scratch ? amk_scratch_alloc(g->scratch, size) : amk_xmalloc(size);
}
static void *graph_calloc(AmkTaskGraph *g, size_t n, size_t size) {
  return g->scratch ? amk_scratch_calloc(g->scratch, n, size)
                    : amk_xcalloc(n, size);
}

/* Counting-sort offsets of n entries by slot: the entries of slot s go to
 * [off[s], off[s + 1]). */
static uint32_t *slot_offsets(AmkTaskGraph *g, const uint32_t *slot_of_entry,
                              uint32_t n) {
  uint32_t ns = g->n_slots;
  uint32_t *off = graph_calloc(g, (size_t)ns + 1, sizeof(uint32_t));
  for (uint32_t i = 0; i < n; i++)
    off[slot_of_entry[i] + 1]++;
  for (uint32_t s = 0; s < ns; s++)
    off[s + 1] += off[s];
  return off;
}

void amk_graph_build(AmkTaskGraph *g, const AmkModule *m) {
  amk_graph_build_in(g, m, NULL);
}

bool amk_graph_build_acyclic(AmkTaskGraph *g, const AmkModule *m,
                             AmkDiagEngine *diag, const char *pass,
                             const char *consequence) {
  amk_graph_build(g, m);
  if (g->acyclic)
    return true;
  AmkLoc none = {0, 0};
  amk_error(diag, none,
            "%s: the task graph has a cycle, so %s (run -validate for the "
            "cycle)",
            pass, consequence);
  amk_graph_free(g);
  return false;
}

/* Dense out_counter id -> slot table when the ids span little more than the
 * task count (ids equal to positions, the usual case): no hashing. */
static bool build_dense_slots(AmkTaskGraph *g, const AmkModule *m) {
  uint32_t n = m->n_tasks;
  if (n == 0)
    return false;
  int64_t lo = m->tasks[0].out_counter, hi = lo;
  for (uint32_t t = 1; t < n; t++) {
    int64_t c = m->tasks[t].out_counter;
    lo = c < lo ? c : lo;
    hi = c > hi ? c : hi;
  }
  if (hi - lo >= (int64_t)n * 4 + 64)
    return false;
  g->dense_lo = lo;
  g->dense_n = (uint32_t)(hi - lo + 1);
  g->dense_slot = graph_alloc(g, sizeof(uint32_t) * g->dense_n);
  memset(g->dense_slot, 0xff, sizeof(uint32_t) * g->dense_n);
  uint32_t ns = 0;
  for (uint32_t t = 0; t < n; t++) {
    uint32_t *slot = &g->dense_slot[m->tasks[t].out_counter - lo];
    if (*slot == AMK_NO_INDEX)
      *slot = ns++;
    g->task_slot[t] = *slot;
  }
  g->n_slots = ns;
  return true;
}

void amk_graph_build_in(AmkTaskGraph *g, const AmkModule *m,
                        AmkScratch *scratch) {
  memset(g, 0, sizeof *g);
  g->scratch = scratch;
  uint32_t n = m->n_tasks;
  g->n_tasks = n;
  g->task_slot = graph_alloc(g, sizeof(uint32_t) * (n + 1));
  if (!build_dense_slots(g, m)) {
    amk_idmap_init_in(&g->slot_of_counter, 16, scratch);
    for (uint32_t t = 0; t < n; t++)
      g->task_slot[t] = amk_idmap_put(&g->slot_of_counter,
                                      m->tasks[t].out_counter,
                                      g->slot_of_counter.count);
    g->n_slots = g->slot_of_counter.count;
  }
  uint32_t ns = g->n_slots;

  /* Producers per slot (counting sort keeps list order). */
  g->prod_off = slot_offsets(g, g->task_slot, n);
  g->prod = graph_alloc(g, sizeof(uint32_t) * (n + 1));
  uint32_t *fill = graph_alloc(g, sizeof(uint32_t) * (ns + 1));
  memcpy(fill, g->prod_off, sizeof(uint32_t) * ns);
  for (uint32_t t = 0; t < n; t++)
    g->prod[fill[g->task_slot[t]]++] = t;

  /* Distinct waited slots per task (slot_mark doubles as the dedup stamp). */
  g->slot_mark = graph_calloc(g, (size_t)ns + 1, sizeof(uint32_t));
  g->tw_off = graph_alloc(g, sizeof(uint32_t) * (n + 1));
  size_t total_waits = 0;
  for (uint32_t t = 0; t < n; t++)
    total_waits += m->tasks[t].n_waits;
  g->tw_slot = graph_alloc(g, sizeof(uint32_t) * (total_waits + 1));
  uint32_t k = 0;
  for (uint32_t t = 0; t < n; t++) {
    g->tw_off[t] = k;
    const AmkTask *task = &m->tasks[t];
    for (uint32_t w = 0; w < task->n_waits; w++) {
      uint32_t s = amk_graph_counter_slot(g, task->waits[w].counter);
      if (s == AMK_NO_INDEX || g->slot_mark[s] == t + 1)
        continue;
      g->slot_mark[s] = t + 1;
      g->tw_slot[k++] = s;
    }
  }
  g->tw_off[n] = k;
  memset(g->slot_mark, 0, sizeof(uint32_t) * (ns + 1));

  /* Waiters per slot: filled in task order, so ascending and distinct. */
  g->wait_off = slot_offsets(g, g->tw_slot, k);
  g->waiter = graph_alloc(g, sizeof(uint32_t) * (k + 1));
  memcpy(fill, g->wait_off, sizeof(uint32_t) * ns);
  for (uint32_t t = 0; t < n; t++)
    for (uint32_t i = g->tw_off[t]; i < g->tw_off[t + 1]; i++)
      g->waiter[fill[g->tw_slot[i]]++] = t;
  g->n_edges = 0;
  for (uint32_t s = 0; s < ns; s++)
    g->n_edges += (int64_t)(g->prod_off[s + 1] - g->prod_off[s]) *
                  (int64_t)(g->wait_off[s + 1] - g->wait_off[s]);

  /* Kahn's algorithm in the reference's order. A task's in-degree reaches 0
   * exactly when the last producer of its last pending slot is taken, so
   * counting per slot yields the same FIFO order as per-edge counting. */
  uint32_t *slot_left = fill; /* producers not yet taken, per slot */
  for (uint32_t s = 0; s < ns; s++)
    slot_left[s] = g->prod_off[s + 1] - g->prod_off[s];
  uint32_t *task_left = graph_alloc(g, sizeof(uint32_t) * (n + 1));
  g->topo = graph_alloc(g, sizeof(uint32_t) * (n + 1));
  g->topo_pos = graph_alloc(g, sizeof(uint32_t) * (n + 1));
  uint32_t head = 0, tail = 0;
  for (uint32_t t = 0; t < n; t++) {
    task_left[t] = g->tw_off[t + 1] - g->tw_off[t];
    if (task_left[t] == 0)
      g->topo[tail++] = t;
  }
  while (head < tail) {
    uint32_t x = g->topo[head++];
    uint32_t s = g->task_slot[x];
    if (--slot_left[s] != 0)
      continue;
    for (uint32_t i = g->wait_off[s]; i < g->wait_off[s + 1]; i++)
      if (--task_left[g->waiter[i]] == 0)
        g->topo[tail++] = g->waiter[i];
  }
  g->acyclic = tail == n;
  for (uint32_t i = 0; i < n; i++)
    g->topo_pos[i] = AMK_NO_INDEX;
  for (uint32_t i = 0; i < tail; i++)
    g->topo_pos[g->topo[i]] = i;
  if (!scratch) {
    free(task_left);
    free(fill);
  }

  g->task_mark = graph_calloc(g, (size_t)n + 1, sizeof(uint32_t));
  g->stack = graph_alloc(g, sizeof(uint32_t) * (n + 1));
  g->generation = 0;
}

void amk_graph_free(AmkTaskGraph *g) {
  amk_idmap_free(&g->slot_of_counter);
  if (g->scratch) { /* nothing of ours to free */
    memset(g, 0, sizeof *g);
    return;
  }
  free(g->dense_slot);
  free(g->task_slot);
  free(g->prod_off);
  free(g->prod);
  free(g->wait_off);
  free(g->waiter);
  free(g->tw_off);
  free(g->tw_slot);
  free(g->topo);
  free(g->topo_pos);
  free(g->task_mark);
  free(g->slot_mark);
  free(g->stack);
  memset(g, 0, sizeof *g);
}

bool amk_graph_waits_on_slot(const AmkTaskGraph *g, uint32_t t, uint32_t slot) {
  for (uint32_t i = g->tw_off[t]; i < g->tw_off[t + 1]; i++)
    if (g->tw_slot[i] == slot)
      return true;
  return false;
}

static uint32_t next_generation(AmkTaskGraph *g) {
  if (++g->generation == 0) { /* wrapped: clear stale stamps */
    memset(g->task_mark, 0, sizeof(uint32_t) * (g->n_tasks + 1));
    memset(g->slot_mark, 0, sizeof(uint32_t) * (g->n_slots + 1));
    g->generation = 1;
  }
  return g->generation;
}

void amk_graph_mark_ancestors(AmkTaskGraph *g, uint32_t v, uint32_t min_pos) {
  AMK_ASSERT(g->acyclic);
  uint32_t gen = next_generation(g);
  uint32_t sp = 0;
  g->stack[sp++] = v;
  while (sp > 0) {
    uint32_t x = g->stack[--sp];
    for (uint32_t i = g->tw_off[x]; i < g->tw_off[x + 1]; i++) {
      uint32_t s = g->tw_slot[i];
      if (g->slot_mark[s] == gen)
        continue;
      g->slot_mark[s] = gen;
      for (uint32_t j = g->prod_off[s]; j < g->prod_off[s + 1]; j++) {
        uint32_t p = g->prod[j];
        if (g->topo_pos[p] < min_pos || g->task_mark[p] == gen)
          continue;
        g->task_mark[p] = gen;
        g->stack[sp++] = p;
      }
    }
  }
}

bool amk_graph_before(AmkTaskGraph *g, uint32_t u, uint32_t v) {
  if (u == v || g->topo_pos[u] >= g->topo_pos[v])
    return false;
  if (amk_graph_waits_on_slot(g, v, g->task_slot[u]))
    return true;
  amk_graph_mark_ancestors(g, v, g->topo_pos[u]);
  return amk_graph_is_marked(g, u);
}

const char *amk_task_display_name(const AmkTask *t) {
  if (t->label && t->label[0])
    return t->label;
  const AmkOpInfo *info = (unsigned)t->op < AMK_OP_COUNT ? amk_op_info(t->op) : NULL;
  return info ? info->json_name : "?";
}

/* Appends to a fixed buffer, marking truncation with "...". */
typedef struct {
  char *buf;
  size_t size, len;
  bool truncated;
} Out;

static void out_put(Out *o, const char *s, size_t n) {
  if (o->truncated)
    return;
  if (o->len + n + 4 > o->size) {
    size_t room = o->size > o->len + 4 ? o->size - o->len - 4 : 0;
    memcpy(o->buf + o->len, s, room);
    o->len += room;
    memcpy(o->buf + o->len, "...", 4);
    o->len += 3;
    o->truncated = true;
    return;
  }
  memcpy(o->buf + o->len, s, n);
  o->len += n;
  o->buf[o->len] = '\0';
}
static void out_str(Out *o, const char *s) { out_put(o, s, strlen(s)); }

uint32_t amk_graph_describe_cycle(const AmkTaskGraph *g, const AmkModule *m,
                                  char *buf, size_t size) {
  AMK_ASSERT(size >= 32);
  Out o = {buf, size, 0, false};
  buf[0] = '\0';
  enum { WHITE, GRAY, BLACK };
  uint32_t n = g->n_tasks;
  unsigned char *color = amk_xcalloc((size_t)n + 1, 1);
  unsigned char *slot_done = amk_xcalloc((size_t)g->n_slots + 1, 1);
  uint32_t *path = amk_xmalloc(sizeof(uint32_t) * (n + 1));
  uint32_t *next = amk_xmalloc(sizeof(uint32_t) * (n + 1)); /* iterator */
  uint32_t *path_index = amk_xmalloc(sizeof(uint32_t) * (n + 1));
  bool found = false;
  uint32_t start = AMK_NO_INDEX;
  for (uint32_t root = 0; root < n && !found; root++) {
    if (color[root] != WHITE)
      continue;
    uint32_t depth = 0;
    path[depth] = root;
    path_index[root] = depth++;
    color[root] = GRAY;
    next[root] = g->wait_off[g->task_slot[root]];
    while (depth > 0 && !found) {
      uint32_t node = path[depth - 1];
      uint32_t s = g->task_slot[node];
      bool advanced = false;
      /* A finished slot's waiters are all BLACK: nothing to find there. */
      uint32_t end = slot_done[s] ? next[node] : g->wait_off[s + 1];
      while (next[node] < end) {
        uint32_t v = g->waiter[next[node]++];
        if (color[v] == GRAY) {
          out_str(&o, "cycle: ");
          for (uint32_t i = path_index[v]; i < depth; i++) {
            char head[64];
            snprintf(head, sizeof head, "%" PRId32 ":", m->tasks[path[i]].id);
            out_str(&o, head);
            out_str(&o, amk_task_display_name(&m->tasks[path[i]]));
            out_str(&o, " -> ");
          }
          char head[64];
          snprintf(head, sizeof head, "%" PRId32 ":", m->tasks[v].id);
          out_str(&o, head);
          out_str(&o, amk_task_display_name(&m->tasks[v]));
          found = true;
          start = v;
          break;
        }
        if (color[v] == WHITE) {
          color[v] = GRAY;
          next[v] = g->wait_off[g->task_slot[v]];
          path[depth] = v;
          path_index[v] = depth++;
          advanced = true;
          break;
        }
      }
      if (!advanced && !found) {
        color[node] = BLACK;
        slot_done[s] = 1;
        depth--;
      }
    }
  }
  if (!found)
    out_str(&o, "cycle: <not localized>");
  free(color);
  free(slot_done);
  free(path);
  free(next);
  free(path_index);
  return start;
}

/* ---- Python repr -------------------------------------------------------- */

static void repr_into(const AmkValue *v, Out *o, int depth) {
  char tmp[48];
  if (depth > 16) {
    out_str(o, "...");
    return;
  }
  switch (v->kind) {
  case AMK_VALUE_NULL:
    out_str(o, "None");
    return;
  case AMK_VALUE_BOOL:
    out_str(o, v->as.b ? "True" : "False");
    return;
  case AMK_VALUE_INT:
    snprintf(tmp, sizeof tmp, "%" PRId64, v->as.i);
    out_str(o, tmp);
    return;
  case AMK_VALUE_FLOAT:
    amk_format_float_repr(v->as.f, tmp);
    out_str(o, tmp);
    return;
  case AMK_VALUE_STRING: {
    const char *s = v->as.s ? v->as.s : "";
    char quote = (strchr(s, '\'') && !strchr(s, '"')) ? '"' : '\'';
    out_put(o, &quote, 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
      if (*p == '\\' || *p == (unsigned char)quote) {
        char esc[2] = {'\\', (char)*p};
        out_put(o, esc, 2);
      } else if (*p == '\n') {
        out_str(o, "\\n");
      } else if (*p == '\r') {
        out_str(o, "\\r");
      } else if (*p == '\t') {
        out_str(o, "\\t");
      } else if (*p < 0x20 || *p == 0x7f) {
        snprintf(tmp, sizeof tmp, "\\x%02x", *p);
        out_str(o, tmp);
      } else {
        out_put(o, (const char *)p, 1);
      }
    }
    out_put(o, &quote, 1);
    return;
  }
  case AMK_VALUE_LIST:
  case AMK_VALUE_OBJECT: {
    bool is_object = v->kind == AMK_VALUE_OBJECT;
    out_str(o, is_object ? "{" : "[");
    for (uint32_t i = 0; i < v->count && !o->truncated; i++) {
      if (i)
        out_str(o, ", ");
      if (is_object) {
        AmkValue key = {.kind = AMK_VALUE_STRING};
        key.as.s = v->as.members[i].key;
        repr_into(&key, o, depth + 1);
        out_str(o, ": ");
      }
      repr_into(is_object ? &v->as.members[i].value : &v->as.items[i], o,
                depth + 1);
    }
    out_str(o, is_object ? "}" : "]");
    return;
  }
  }
  out_str(o, "?");
}

void amk_value_repr(const AmkValue *v, char *buf, size_t size) {
  AMK_ASSERT(size >= 8);
  Out o = {buf, size, 0, false};
  buf[0] = '\0';
  repr_into(v, &o, 0);
}
