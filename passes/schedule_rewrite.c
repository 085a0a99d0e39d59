/* Helpers shared by tile and fuse; see schedule_rewrite.h. */
#include "schedule_rewrite.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t *amk_rw_producer_counts(const AmkModule *m, const AmkIdIndex *counters) {
  uint32_t *count = amk_xcalloc(m->n_counters ? m->n_counters : 1, sizeof *count);
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    uint32_t c = amk_id_index_get(counters, m->tasks[t].out_counter);
    if (c != AMK_NO_INDEX)
      count[c]++;
  }
  return count;
}

int64_t amk_rw_pattern(const AmkTask *t) {
  int64_t flags = 0;
  if (!amk_task_param_int(t, "flags", &flags) || flags < 0)
    return 0;
  return flags >> AMK_PATTERN_SHIFT;
}

int64_t amk_rw_low_flags(const AmkTask *t) {
  int64_t flags = 0;
  if (!amk_task_param_int(t, "flags", &flags) || flags < 0)
    return 0;
  return flags & ((1 << AMK_PATTERN_SHIFT) - 1);
}

bool amk_rw_quantized(const AmkTask *t) { return amk_task_param(t, "qdtype") != NULL; }

void amk_rw_copy_params(AmkModule *m, AmkTask *dst, const AmkTask *src) {
  dst->n_params = src->n_params;
  dst->params = src->n_params ? amk_arena_memdup(&m->arena, src->params,
                                                 src->n_params * sizeof *src->params)
                              : NULL;
}

bool amk_rw_parse_int(const char *text, int64_t min, int64_t max, int64_t *out) {
  if (!text || !*text)
    return false;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || *end || v < min || v > max)
    return false;
  *out = v;
  return true;
}

/* ---- edits ------------------------------------------------------------------ */

static void mark(uint8_t **flags, uint32_t *cap, uint32_t pos) {
  if (pos >= *cap) {
    uint32_t new_cap = *cap ? *cap : 64;
    while (new_cap <= pos)
      new_cap *= 2;
    *flags = amk_xrealloc(*flags, new_cap);
    memset(*flags + *cap, 0, new_cap - *cap);
    *cap = new_cap;
  }
  (*flags)[pos] = 1;
}

static bool marked(const uint8_t *flags, uint32_t cap, uint32_t pos) {
  return pos < cap && flags[pos];
}

void amk_rw_edit_init(AmkRwEdit *e, const AmkModule *m) {
  memset(e, 0, sizeof *e);
  e->first_new = m->n_tasks;
}

void amk_rw_edit_free(AmkRwEdit *e) {
  free(e->dead_task);
  free(e->dead_buffer);
  free(e->dead_counter);
  free(e->anchor);
  memset(e, 0, sizeof *e);
}

void amk_rw_kill_task(AmkRwEdit *e, uint32_t pos) { mark(&e->dead_task, &e->cap_task, pos); }
void amk_rw_kill_buffer(AmkRwEdit *e, uint32_t pos) {
  mark(&e->dead_buffer, &e->cap_buffer, pos);
}
void amk_rw_kill_counter(AmkRwEdit *e, uint32_t pos) {
  mark(&e->dead_counter, &e->cap_counter, pos);
}
bool amk_rw_task_dead(const AmkRwEdit *e, uint32_t pos) {
  return marked(e->dead_task, e->cap_task, pos);
}
bool amk_rw_buffer_dead(const AmkRwEdit *e, uint32_t pos) {
  return marked(e->dead_buffer, e->cap_buffer, pos);
}

AmkTask *amk_rw_add_task(AmkModule *m, AmkRwEdit *e, uint32_t anchor) {
  if (e->n_anchor == e->cap_anchor) {
    e->cap_anchor = e->cap_anchor ? 2 * e->cap_anchor : 64;
    e->anchor = amk_xrealloc(e->anchor, e->cap_anchor * sizeof *e->anchor);
  }
  AMK_ASSERT(m->n_tasks == e->first_new + e->n_anchor);
  e->anchor[e->n_anchor++] = anchor;
  return amk_module_add_task(m);
}

void amk_rw_fix_thresholds(AmkModule *m, const AmkRwEdit *e,
                           const uint32_t *old_counts, uint32_t n_old) {
  AmkIdIndex counters;
  amk_id_index_build(&counters, m->counters, sizeof *m->counters, m->n_counters);
  uint32_t *now = amk_xcalloc(m->n_counters ? m->n_counters : 1, sizeof *now);
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    if (e && amk_rw_task_dead(e, t))
      continue;
    uint32_t c = amk_id_index_get(&counters, m->tasks[t].out_counter);
    if (c != AMK_NO_INDEX)
      now[c]++;
  }
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    if (e && amk_rw_task_dead(e, t))
      continue;
    AmkTask *task = &m->tasks[t];
    for (uint32_t w = 0; w < task->n_waits; w++) {
      AmkWait *wait = &task->waits[w];
      uint32_t c = amk_id_index_get(&counters, wait->counter);
      int64_t th;
      if (c == AMK_NO_INDEX || !amk_value_as_int(&wait->threshold, &th))
        continue;
      bool full_join = th == AMK_RW_FULL_JOIN ||
                       (c < n_old && old_counts[c] > 0 && th == old_counts[c]);
      if (full_join && now[c] > 0)
        wait->threshold = amk_value_int(now[c]);
    }
  }
  free(now);
  amk_id_index_free(&counters);
}

/* old position -> new position (AMK_NO_INDEX when removed) for n records. */
static uint32_t *survivor_map(uint32_t n, const uint8_t *dead, uint32_t cap,
                              uint32_t *n_live) {
  uint32_t *map = amk_xmalloc((n ? n : 1) * sizeof *map);
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; i++)
    map[i] = marked(dead, cap, i) ? AMK_NO_INDEX : k++;
  *n_live = k;
  return map;
}

static int32_t remap_id(const AmkIdIndex *ix, const uint32_t *map, int32_t id) {
  uint32_t pos = amk_id_index_get(ix, id);
  if (pos == AMK_NO_INDEX)
    return id; /* a dangling reference stays as it was; verify reports it */
  AMK_ASSERT(map[pos] != AMK_NO_INDEX && "a live task names a removed record");
  return (int32_t)map[pos];
}

/* Keeps the records array[i] whose map[i] is set, in order, each renumbered
 * to its new position, and updates count. */
#define KEEP_MAPPED(array, count, map)                                         \
  do {                                                                         \
    uint32_t kept_ = 0;                                                        \
    for (uint32_t i_ = 0; i_ < (count); i_++)                                  \
      if ((map)[i_] != AMK_NO_INDEX) {                                         \
        (array)[kept_] = (array)[i_];                                          \
        (array)[kept_].id = (int32_t)kept_;                                    \
        kept_++;                                                               \
      }                                                                        \
    (count) = kept_;                                                           \
  } while (0)

void amk_rw_compact(AmkModule *m, AmkRwEdit *e, AmkPassContext *ctx,
                    const char *pass) {
  AmkIdIndex buf_ix, cnt_ix, task_ix;
  amk_id_index_build(&buf_ix, m->buffers, sizeof *m->buffers, m->n_buffers);
  amk_id_index_build(&cnt_ix, m->counters, sizeof *m->counters, m->n_counters);
  amk_id_index_build(&task_ix, m->tasks, sizeof *m->tasks, m->n_tasks);
  uint32_t n_buf, n_cnt;
  uint32_t *buf_map = survivor_map(m->n_buffers, e->dead_buffer, e->cap_buffer, &n_buf);
  uint32_t *cnt_map = survivor_map(m->n_counters, e->dead_counter, e->cap_counter, &n_cnt);

  /* Task order: each old task, then the new tasks anchored at it. */
  uint32_t n_old = e->first_new, n_new = e->n_anchor;
  uint32_t *start = amk_xcalloc((size_t)n_old + 2, sizeof *start);
  for (uint32_t i = 0; i < n_new; i++)
    start[(e->anchor[i] < n_old ? e->anchor[i] : n_old) + 1]++;
  for (uint32_t i = 0; i <= n_old; i++)
    start[i + 1] += start[i];
  uint32_t *by_anchor = amk_xmalloc((n_new ? n_new : 1) * sizeof *by_anchor);
  uint32_t *fill = amk_xmalloc(((size_t)n_old + 1) * sizeof *fill);
  memcpy(fill, start, ((size_t)n_old + 1) * sizeof *fill);
  for (uint32_t i = 0; i < n_new; i++)
    by_anchor[fill[e->anchor[i] < n_old ? e->anchor[i] : n_old]++] = n_old + i;
  uint32_t *order = amk_xmalloc(((size_t)m->n_tasks + 1) * sizeof *order);
  uint32_t *task_map = amk_xmalloc(((size_t)m->n_tasks + 1) * sizeof *task_map);
  uint32_t n_order = 0;
  for (uint32_t t = 0; t < m->n_tasks; t++)
    task_map[t] = AMK_NO_INDEX;
  for (uint32_t a = 0; a <= n_old; a++) {
    if (a < n_old && !amk_rw_task_dead(e, a))
      task_map[a] = n_order, order[n_order++] = a;
    for (uint32_t k = start[a]; k < start[a + 1]; k++)
      if (!amk_rw_task_dead(e, by_anchor[k]))
        task_map[by_anchor[k]] = n_order, order[n_order++] = by_anchor[k];
  }

  AmkTask *tasks = amk_xmalloc(((size_t)n_order + 1) * sizeof *tasks);
  for (uint32_t k = 0; k < n_order; k++) {
    AmkTask t = m->tasks[order[k]];
    t.id = (int32_t)k;
    for (uint32_t i = 0; i < t.n_inputs; i++)
      t.inputs[i] = remap_id(&buf_ix, buf_map, t.inputs[i]);
    for (uint32_t i = 0; i < t.n_outputs; i++)
      t.outputs[i] = remap_id(&buf_ix, buf_map, t.outputs[i]);
    t.out_counter = remap_id(&cnt_ix, cnt_map, t.out_counter);
    for (uint32_t w = 0; w < t.n_waits; w++)
      t.waits[w].counter = remap_id(&cnt_ix, cnt_map, t.waits[w].counter);
    tasks[k] = t;
  }
  /* An explicit SM map keyed by old task ids follows its tasks. */
  if (m->config && m->config->n_sm_map) {
    uint32_t kept = 0;
    for (uint32_t i = 0; i < m->config->n_sm_map; i++) {
      uint32_t pos = amk_id_index_get(&task_ix, m->config->sm_map[i].task);
      if (pos == AMK_NO_INDEX || task_map[pos] == AMK_NO_INDEX)
        continue;
      m->config->sm_map[kept] = m->config->sm_map[i];
      m->config->sm_map[kept++].task = (int32_t)task_map[pos];
    }
    m->config->n_sm_map = kept;
  }
  free(m->tasks);
  m->tasks = tasks;
  m->n_tasks = m->cap_tasks = n_order;
  if (m->cap_tasks == 0)
    m->cap_tasks = 1;

  KEEP_MAPPED(m->buffers, m->n_buffers, buf_map);
  KEEP_MAPPED(m->counters, m->n_counters, cnt_map);
  if (m->pages) {
    m->pages = NULL;
    amk_diag(ctx->diag, AMK_SEVERITY_REMARK, (AmkLoc){0, 0},
             "%s: the page table described the old buffers and was dropped; "
             "run color again", pass);
  }
  free(start);
  free(by_anchor);
  free(fill);
  free(order);
  free(task_map);
  free(buf_map);
  free(cnt_map);
  amk_id_index_free(&buf_ix);
  amk_id_index_free(&cnt_ix);
  amk_id_index_free(&task_ix);
}

/* ---- names ------------------------------------------------------------------- */

static const char *unique_name(AmkModule *m, const char *base, bool buffers) {
  char name[256];
  snprintf(name, sizeof name, "%s", base);
  for (int suffix = 2;; suffix++) {
    bool taken = false;
    uint32_t n = buffers ? m->n_buffers : m->n_counters;
    for (uint32_t i = 0; i < n && !taken; i++) {
      const char *other = buffers ? m->buffers[i].name : m->counters[i].name;
      taken = other && strcmp(other, name) == 0;
    }
    if (!taken)
      return amk_arena_strdup(&m->arena, name);
    snprintf(name, sizeof name, "%s.%d", base, suffix);
  }
}

const char *amk_rw_unique_buffer_name(AmkModule *m, const char *base) {
  return unique_name(m, base, true);
}

const char *amk_rw_unique_counter_name(AmkModule *m, const char *base) {
  return unique_name(m, base, false);
}

/* ---- hops ---------------------------------------------------------------------- */

/* The layer a label names ("L12.q_proj[t3]" -> 12), or -1. */
static int64_t layer_of(const char *label) {
  if (!label || label[0] != 'L' || label[1] < '0' || label[1] > '9')
    return -1;
  int64_t n = 0;
  const char *p = label + 1;
  while (*p >= '0' && *p <= '9' && n < 100000000)
    n = n * 10 + (*p++ - '0');
  return *p == '.' ? n : -1;
}

bool amk_rw_hops(const AmkModule *m, int64_t *critical_path, int64_t *per_layer) {
  *critical_path = *per_layer = 0;
  AmkTaskGraph g;
  amk_graph_build(&g, m);
  if (!g.acyclic) {
    amk_graph_free(&g);
    return false;
  }
  uint32_t n = g.n_tasks, ns = g.n_slots;
  int64_t *depth = amk_xcalloc(n ? n : 1, sizeof *depth);
  int64_t *layer_depth = amk_xcalloc(n ? n : 1, sizeof *layer_depth);
  int64_t *layer = amk_xmalloc((n ? n : 1) * sizeof *layer);
  int64_t *slot_depth = amk_xcalloc(ns ? ns : 1, sizeof *slot_depth);
  int64_t *slot_layer = amk_xmalloc((ns ? ns : 1) * sizeof *slot_layer);
  for (uint32_t t = 0; t < n; t++)
    layer[t] = layer_of(m->tasks[t].label);
  /* A slot whose producers all belong to one layer: that layer, else -2. */
  for (uint32_t s = 0; s < ns; s++) {
    slot_layer[s] = g.prod_off[s] < g.prod_off[s + 1] ? layer[g.prod[g.prod_off[s]]] : -2;
    for (uint32_t j = g.prod_off[s]; j < g.prod_off[s + 1]; j++)
      if (layer[g.prod[j]] != slot_layer[s])
        slot_layer[s] = -2;
  }
  int64_t *slot_layer_depth = amk_xcalloc(ns ? ns : 1, sizeof *slot_layer_depth);
  for (uint32_t k = 0; k < n; k++) {
    uint32_t t = g.topo[k];
    int64_t best = 0, best_layer = 0;
    for (uint32_t j = g.tw_off[t]; j < g.tw_off[t + 1]; j++) {
      uint32_t s = g.tw_slot[j];
      if (slot_depth[s] > best)
        best = slot_depth[s];
      if (layer[t] < 0)
        continue;
      if (slot_layer[s] == layer[t]) {
        if (slot_layer_depth[s] > best_layer)
          best_layer = slot_layer_depth[s];
      } else if (slot_layer[s] == -2) {
        for (uint32_t p = g.prod_off[s]; p < g.prod_off[s + 1]; p++)
          if (layer[g.prod[p]] == layer[t] && layer_depth[g.prod[p]] > best_layer)
            best_layer = layer_depth[g.prod[p]];
      }
    }
    depth[t] = best + 1;
    layer_depth[t] = layer[t] >= 0 ? best_layer + 1 : 0;
    if (depth[t] > *critical_path)
      *critical_path = depth[t];
    if (layer_depth[t] > *per_layer)
      *per_layer = layer_depth[t];
    uint32_t s = g.task_slot[t];
    if (s != AMK_NO_INDEX) {
      if (depth[t] > slot_depth[s])
        slot_depth[s] = depth[t];
      if (layer_depth[t] > slot_layer_depth[s])
        slot_layer_depth[s] = layer_depth[t];
    }
  }
  free(depth);
  free(layer_depth);
  free(layer);
  free(slot_depth);
  free(slot_layer);
  free(slot_layer_depth);
  amk_graph_free(&g);
  return true;
}
