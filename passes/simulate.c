/* Dynamic cross-checks of the static proof: `simulate-counters` (firing by
 * counters in repeated list-order sweeps, the reference's simulate_counters)
 * and `simulate-adversarial=N` (N seeded random interleavings, reporting reads
 * of transient buffers before every other writer fired).
 *
 * Both are event driven: each wait is a (counter, needed count) pair sorted
 * per counter, so a firing touches only the waits it satisfies and a run is
 * O((tasks + waits) log tasks), not the reference's O(tasks^2) rescans.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/compare.h"
#include "amk/pass.h"
#include "amk/validate.h"
#include "validate_graph.h"

/* Diagnostics about the module as a whole carry no position. */
static const AmkLoc no_loc = {0, 0};

enum { MAX_REPORTS = 50 };

/* needed count of a wait: the least counter value meeting the threshold;
 * NEVER for a threshold no integer meets (NaN, strings, lists...). */
#define NEVER INT64_MAX

static int64_t needed_count(const AmkValue *thr) {
  switch (thr->kind) {
  case AMK_VALUE_INT:
    return thr->as.i;
  case AMK_VALUE_BOOL:
    return thr->as.b ? 1 : 0;
  case AMK_VALUE_FLOAT:
    if (isnan(thr->as.f) || thr->as.f > 9.0e18)
      return NEVER;
    if (thr->as.f < -9.0e18)
      return INT64_MIN;
    return (int64_t)ceil(thr->as.f);
  default:
    return NEVER;
  }
}

typedef struct {
  uint32_t task;
  int64_t needed;
} WaitEntry;

typedef struct {
  const AmkModule *m;
  uint32_t n_tasks, n_slots;
  AmkIdMap slot_of;
  uint32_t *task_slot;
  int64_t *init;       /* per slot */
  uint32_t *w_off;     /* waits per slot, sorted by needed */
  WaitEntry *w;
  /* per-run state */
  int64_t *value;
  uint32_t *cursor;    /* first unsatisfied wait per slot */
  uint32_t *unmet;     /* unsatisfied waits per task */
} CounterSim;

static int compare_wait(const void *pa, const void *pb) {
  const WaitEntry *a = pa, *b = pb;
  return amk_compare_i64_then(a->needed, b->needed, a->task, b->task);
}

static uint32_t slot_for(CounterSim *s, int32_t id) {
  return amk_idmap_put(&s->slot_of, id, s->slot_of.count);
}

static void sim_init(CounterSim *s, const AmkModule *m) {
  memset(s, 0, sizeof *s);
  s->m = m;
  s->n_tasks = m->n_tasks;
  amk_idmap_init(&s->slot_of, (size_t)m->n_counters + 16);
  for (uint32_t c = 0; c < m->n_counters; c++)
    slot_for(s, m->counters[c].id);
  s->task_slot = amk_xmalloc(sizeof(uint32_t) * (m->n_tasks + 1));
  size_t n_waits = 0;
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    s->task_slot[t] = slot_for(s, m->tasks[t].out_counter);
    for (uint32_t i = 0; i < m->tasks[t].n_waits; i++)
      slot_for(s, m->tasks[t].waits[i].counter);
    n_waits += m->tasks[t].n_waits;
  }
  s->n_slots = s->slot_of.count;
  s->init = amk_xcalloc((size_t)s->n_slots + 1, sizeof(int64_t));
  /* Later duplicates win, as in the reference's dict comprehension. */
  for (uint32_t c = 0; c < m->n_counters; c++)
    s->init[amk_idmap_get(&s->slot_of, m->counters[c].id)] = m->counters[c].init;
  s->w_off = amk_xcalloc((size_t)s->n_slots + 2, sizeof(uint32_t));
  s->w = amk_xmalloc(sizeof(WaitEntry) * (n_waits + 1));
  for (uint32_t t = 0; t < m->n_tasks; t++)
    for (uint32_t i = 0; i < m->tasks[t].n_waits; i++)
      s->w_off[amk_idmap_get(&s->slot_of, m->tasks[t].waits[i].counter) + 1]++;
  for (uint32_t k = 0; k < s->n_slots; k++)
    s->w_off[k + 1] += s->w_off[k];
  uint32_t *fill = amk_xmalloc(sizeof(uint32_t) * (s->n_slots + 1));
  memcpy(fill, s->w_off, sizeof(uint32_t) * s->n_slots);
  for (uint32_t t = 0; t < m->n_tasks; t++)
    for (uint32_t i = 0; i < m->tasks[t].n_waits; i++) {
      const AmkWait *w = &m->tasks[t].waits[i];
      uint32_t k = amk_idmap_get(&s->slot_of, w->counter);
      s->w[fill[k]++] = (WaitEntry){t, needed_count(&w->threshold)};
    }
  free(fill);
  for (uint32_t k = 0; k < s->n_slots; k++)
    qsort(s->w + s->w_off[k], s->w_off[k + 1] - s->w_off[k], sizeof *s->w,
          compare_wait);
  s->value = amk_xmalloc(sizeof(int64_t) * (s->n_slots + 1));
  s->cursor = amk_xmalloc(sizeof(uint32_t) * (s->n_slots + 1));
  s->unmet = amk_xmalloc(sizeof(uint32_t) * (s->n_tasks + 1));
}

static void sim_free(CounterSim *s) {
  amk_idmap_free(&s->slot_of);
  free(s->task_slot);
  free(s->init);
  free(s->w_off);
  free(s->w);
  free(s->value);
  free(s->cursor);
  free(s->unmet);
}

/* Satisfy the waits of slot k that its value now meets; `on_ready` gets each
 * task whose last unmet wait this was. */
typedef void (*ReadyFn)(void *ctx, uint32_t task);
static void sim_advance(CounterSim *s, uint32_t k, ReadyFn on_ready, void *ctx) {
  while (s->cursor[k] < s->w_off[k + 1] &&
         s->w[s->cursor[k]].needed != NEVER &&
         s->w[s->cursor[k]].needed <= s->value[k]) {
    uint32_t t = s->w[s->cursor[k]++].task;
    if (--s->unmet[t] == 0)
      on_ready(ctx, t);
  }
}

/* Resets the run state; calls on_ready for the tasks ready at the start. */
static void sim_reset(CounterSim *s, ReadyFn on_ready, void *ctx) {
  for (uint32_t t = 0; t < s->n_tasks; t++)
    s->unmet[t] = s->m->tasks[t].n_waits;
  for (uint32_t k = 0; k < s->n_slots; k++) {
    s->value[k] = s->init[k];
    s->cursor[k] = s->w_off[k];
  }
  for (uint32_t t = 0; t < s->n_tasks; t++)
    if (s->unmet[t] == 0)
      on_ready(ctx, t);
  for (uint32_t k = 0; k < s->n_slots; k++)
    sim_advance(s, k, on_ready, ctx);
}

static void sim_fire(CounterSim *s, uint32_t t, ReadyFn on_ready, void *ctx) {
  uint32_t k = s->task_slot[t];
  if (s->value[k] < INT64_MAX)
    s->value[k]++;
  sim_advance(s, k, on_ready, ctx);
}

/* ---- simulate-counters ---------------------------------------------------- */

typedef struct {
  uint32_t *items;
  size_t n;
} MinHeap;

static void heap_push(MinHeap *h, uint32_t x) {
  size_t i = h->n++;
  while (i > 0 && h->items[(i - 1) / 2] > x) {
    h->items[i] = h->items[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h->items[i] = x;
}

static uint32_t heap_pop(MinHeap *h) {
  uint32_t top = h->items[0], x = h->items[--h->n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->n)
      break;
    if (c + 1 < h->n && h->items[c + 1] < h->items[c])
      c++;
    if (h->items[c] >= x)
      break;
    h->items[i] = h->items[c];
    i = c;
  }
  h->items[i] = x;
  return top;
}

/* A sweep visits tasks in list order: a task made ready by task p fires in
 * this sweep when it comes after p, else in the next one. */
typedef struct {
  MinHeap this_sweep, next_sweep;
  uint32_t cursor; /* the task firing now; UINT32_MAX before the first */
} Sweeps;

static void sweeps_ready(void *ctx, uint32_t t) {
  Sweeps *sw = ctx;
  if (sw->cursor == UINT32_MAX || t > sw->cursor)
    heap_push(&sw->this_sweep, t);
  else
    heap_push(&sw->next_sweep, t);
}

size_t amk_simulate_counters(const AmkModule *m, AmkDiagEngine *diag,
                             uint32_t *order) {
  CounterSim s;
  sim_init(&s, m);
  Sweeps sw;
  sw.this_sweep.items = amk_xmalloc(sizeof(uint32_t) * (m->n_tasks + 1));
  sw.next_sweep.items = amk_xmalloc(sizeof(uint32_t) * (m->n_tasks + 1));
  sw.this_sweep.n = sw.next_sweep.n = 0;
  sw.cursor = UINT32_MAX;
  unsigned char *fired = amk_xcalloc((size_t)m->n_tasks + 1, 1);
  sim_reset(&s, sweeps_ready, &sw);
  size_t n_fired = 0;
  for (;;) {
    if (sw.this_sweep.n == 0) {
      if (sw.next_sweep.n == 0)
        break;
      MinHeap tmp = sw.this_sweep;
      sw.this_sweep = sw.next_sweep;
      sw.next_sweep = tmp;
    }
    uint32_t t = heap_pop(&sw.this_sweep);
    sw.cursor = t;
    fired[t] = 1;
    if (order)
      order[n_fired] = t;
    n_fired++;
    sim_fire(&s, t, sweeps_ready, &sw);
  }
  size_t stuck = m->n_tasks - n_fired, reported = 0;
  char repr[64];
  for (uint32_t t = 0; t < m->n_tasks && stuck; t++) {
    if (fired[t])
      continue;
    if (reported++ == MAX_REPORTS) {
      amk_note(diag, no_loc, "%zu more stuck tasks not shown",
               stuck - MAX_REPORTS);
      break;
    }
    const AmkTask *task = &m->tasks[t];
    /* Name the first wait that is still unmet. */
    const AmkWait *unmet = NULL;
    int64_t have = 0;
    for (uint32_t i = 0; i < task->n_waits && !unmet; i++) {
      uint32_t k = amk_idmap_get(&s.slot_of, task->waits[i].counter);
      int64_t need = needed_count(&task->waits[i].threshold);
      if (need == NEVER || s.value[k] < need) {
        unmet = &task->waits[i];
        have = s.value[k];
      }
    }
    if (unmet) {
      amk_value_repr(&unmet->threshold, repr, sizeof repr);
      amk_error(diag, task->loc,
                "task %" PRId32 " (%s) is stuck: waits for counter %" PRId32
                " >= %s, which ends at %" PRId64,
                task->id, amk_task_display_name(task), unmet->counter, repr,
                have);
    } else {
      amk_error(diag, task->loc, "task %" PRId32 " (%s) is stuck", task->id,
                amk_task_display_name(task));
    }
  }
  free(fired);
  free(sw.this_sweep.items);
  free(sw.next_sweep.items);
  sim_free(&s);
  return stuck;
}

/* ---- simulate-adversarial ------------------------------------------------- */

typedef struct {
  uint32_t *items;
  size_t n;
} ReadySet;

static void ready_add(void *ctx, uint32_t t) {
  ReadySet *r = ctx;
  r->items[r->n++] = t;
}

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

size_t amk_simulate_adversarial(const AmkModule *m, AmkDiagEngine *diag,
                                uint32_t seeds) {
  CounterSim s;
  sim_init(&s, m);
  AmkIdIndex bufs;
  amk_id_index_build(&bufs, m->buffers, sizeof *m->buffers, m->n_buffers);
  uint32_t nb = m->n_buffers;
  /* Distinct writer tasks per buffer. */
  uint32_t *n_writers = amk_xcalloc((size_t)nb + 1, sizeof(uint32_t));
  uint32_t *stamp = amk_xcalloc((size_t)nb + 1, sizeof(uint32_t));
  for (uint32_t t = 0; t < m->n_tasks; t++)
    for (uint32_t i = 0; i < m->tasks[t].n_outputs; i++) {
      uint32_t b = amk_id_index_get(&bufs, m->tasks[t].outputs[i]);
      if (b != AMK_NO_INDEX && stamp[b] != t + 1) {
        stamp[b] = t + 1;
        n_writers[b]++;
      }
    }
  size_t *input_off = amk_xmalloc(sizeof(size_t) * (m->n_tasks + 1));
  size_t total_inputs = 0;
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    input_off[t] = total_inputs;
    total_inputs += m->tasks[t].n_inputs;
  }
  unsigned char *reported = amk_xcalloc(total_inputs + 1, 1);
  uint32_t *fired_writers = amk_xmalloc(sizeof(uint32_t) * (nb + 1));
  ReadySet ready = {amk_xmalloc(sizeof(uint32_t) * (m->n_tasks + 1)), 0};
  size_t violations = 0;
  if (seeds == 0)
    seeds = 1;
  for (uint32_t seed = 0; seed < seeds; seed++) {
    uint64_t rng = 0x5eedull * (seed + 1);
    memset(fired_writers, 0, sizeof(uint32_t) * (nb + 1));
    memset(stamp, 0, sizeof(uint32_t) * (nb + 1));
    ready.n = 0;
    sim_reset(&s, ready_add, &ready);
    uint32_t step = 0;
    while (ready.n > 0) {
      /* Seed 0 fires in list order of readiness; the rest pick at random. */
      size_t pick = seed == 0 ? 0 : (size_t)(splitmix64(&rng) % ready.n);
      uint32_t t = ready.items[pick];
      ready.items[pick] = ready.items[--ready.n];
      const AmkTask *task = &m->tasks[t];
      step++;
      for (uint32_t i = 0; i < task->n_inputs; i++) {
        uint32_t b = amk_id_index_get(&bufs, task->inputs[i]);
        if (b == AMK_NO_INDEX)
          continue;
        const AmkBuffer *buf = &m->buffers[b];
        if (amk_kind_is_read_only(buf->kind))
          continue;
        bool self_writes = false;
        for (uint32_t j = 0; j < task->n_outputs && !self_writes; j++)
          self_writes = task->outputs[j] == task->inputs[i];
        bool kv = buf->kind == AMK_KIND_KV_CACHE;
        /* Prior-step KV state: nobody writes it, or the reader appends to
         * it itself (the reference's false positive). */
        if (kv && (n_writers[b] == 0 || self_writes))
          continue;
        uint32_t others = n_writers[b] - (self_writes ? 1 : 0);
        bool never = n_writers[b] == 0;
        if (!never && fired_writers[b] >= others)
          continue;
        if (reported[input_off[t] + i])
          continue;
        reported[input_off[t] + i] = 1;
        if (violations++ < MAX_REPORTS) {
          if (never)
            amk_error(diag, task->loc,
                      "[seed %u] task %" PRId32 " (%s) reads buffer #%" PRId32
                      " ('%s') that no task writes",
                      seed, task->id, amk_task_display_name(task), buf->id,
                      buf->name ? buf->name : "");
          else
            amk_error(diag, task->loc,
                      "[seed %u] task %" PRId32 " (%s) reads buffer #%" PRId32
                      " ('%s') at step %u when %u of its %u other writer(s) "
                      "had fired",
                      seed, task->id, amk_task_display_name(task), buf->id,
                      buf->name ? buf->name : "", step, fired_writers[b],
                      others);
        }
      }
      for (uint32_t j = 0; j < task->n_outputs; j++) {
        uint32_t b = amk_id_index_get(&bufs, task->outputs[j]);
        if (b != AMK_NO_INDEX && stamp[b] != t + 1) {
          stamp[b] = t + 1;
          fired_writers[b]++;
        }
      }
      sim_fire(&s, t, ready_add, &ready);
    }
  }
  if (violations > MAX_REPORTS)
    amk_note(diag, no_loc, "%zu more violations not shown",
             violations - MAX_REPORTS);
  free(ready.items);
  free(fired_writers);
  free(reported);
  free(input_off);
  free(stamp);
  free(n_writers);
  amk_id_index_free(&bufs);
  sim_free(&s);
  return violations;
}

/* ---- the passes ----------------------------------------------------------- */

bool amk_pass_simulate_counters(AmkModule *m, AmkPassContext *ctx) {
  size_t stuck = amk_simulate_counters(m, ctx->diag, NULL);
  amk_note(ctx->diag, no_loc,
           "simulate-counters: %zu of %u tasks fired, %zu stuck",
           (size_t)m->n_tasks - stuck, m->n_tasks, stuck);
  if (ctx->stats) {
    amk_stat_int(ctx->stats, "simulate-counters", "fired",
                 (int64_t)(m->n_tasks - stuck));
    amk_stat_int(ctx->stats, "simulate-counters", "stuck", (int64_t)stuck);
  }
  return stuck == 0;
}

bool amk_pass_simulate_adversarial(AmkModule *m, AmkPassContext *ctx) {
  int64_t given = 16; /* -simulate-adversarial=N, in [1, 1000000] */
  amk_pass_option_int(ctx, "simulate-adversarial", &given);
  uint32_t seeds = (uint32_t)given;
  size_t violations = amk_simulate_adversarial(m, ctx->diag, seeds);
  amk_note(ctx->diag, no_loc,
           "simulate-adversarial: %u interleavings, %zu violations", seeds,
           violations);
  if (ctx->stats) {
    amk_stat_int(ctx->stats, "simulate-adversarial", "seeds", seeds);
    amk_stat_int(ctx->stats, "simulate-adversarial", "violations",
                 (int64_t)violations);
  }
  return violations == 0;
}
