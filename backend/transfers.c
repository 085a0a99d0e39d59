/* Launch-tagged transfers: which hops of a decode program the device makes
 * through shadows (amk/backend.h, docs/Backend.md).
 *
 * The tasks are visited in list order, which must be a dependency order, so
 * a producer's final waits are known when its consumers are decided. For a
 * consumer C and a counter c it waits on, the hop is tagged when:
 *   - every task signalling c is a producer that can write a shadow (a
 *     one-row GEMV tile, an attention tile, an o_proj tile with the
 *     combine) and C waits for all of them;
 *   - C reads at least one of their outputs, each at an input C's variant
 *     can read through a shadow, every such input of C is one of them, and
 *     nothing but those producers writes them;
 *   - C's new waits (its old ones but c, plus the producers' own) and its
 *     signal waits fit the ABI;
 *   - every task whose accesses conflict with C's (it writes a page C reads
 *     directly, or touches a page C writes) and that was ordered before C
 *     still is: its counter is reachable from C's new waits, following both
 *     kinds of wait (a task's signal comes after its signal waits held).
 * Ordering is decided on counters: a task is before C when its counter is
 * reachable, which holds for every signaller only where the wait asks for
 * all of them (a partial wait is followed for the old order and not for the
 * new, so it can only refuse a hop).
 */
#include <stdlib.h>
#include <string.h>

#include "amk/backend.h"

/* Producers whose device code writes a shadow beside its output (the store
 * sites of amk_gemv, amk_attention and amk_gemv_combine). */
static bool writes_shadow(const AmkPlan *plan, uint32_t t) {
  const AmkPlanTask *pt = &plan->tasks[t];
  if (pt->op != AMK_OP_GEMV_TILE || pt->n_outputs != 1 || pt->n_inputs < 2)
    return false;
  AmkDType od = plan->buffers[pt->outputs[0]].dtype;
  if (od != AMK_DTYPE_F32 && od != AMK_DTYPE_BF16 && od != AMK_DTYPE_F16)
    return false;
  if (amk_inst_param_has(&pt->params, AMK_PARAM_qdtype) &&
      (pt->params.qdtype.i == AMK_QDTYPE_INT8 || pt->params.qdtype.i == AMK_QDTYPE_INT4))
    return false;
  int64_t pattern = amk_inst_param_has(&pt->params, AMK_PARAM_flags)
                        ? (int64_t)((uint32_t)pt->params.flags.i >> AMK_PATTERN_SHIFT)
                        : 0;
  int64_t k = amk_inst_param_has(&pt->params, AMK_PARAM_K) ? pt->params.K.i : 0;
  int64_t x = plan->buffers[pt->inputs[0]].numel;
  switch (pattern) {
  case AMK_PATTERN_PLAIN:
  case AMK_PATTERN_NORM:
  case AMK_PATTERN_RESIDUAL:
    return k > 0 && x == k; /* one input row */
  case AMK_PATTERN_SILU:
  case AMK_PATTERN_SILU_RESIDUAL:
    return k > 0 && x == 2 * k;
  case AMK_PATTERN_ATTENTION:
  case AMK_PATTERN_ATTENTION_ROPE:
  case AMK_PATTERN_COMBINE_RESIDUAL:
    return true;
  default:
    return false;
  }
}

/* Whether C's variant can read input k through a shadow: the query of a
 * rotating attention tile, the partials of an o_proj tile with the combine
 * (an even head_dim: it reads them in pairs), the input of an mlp tile.
 * An attention_o tile reads none (its qkv straight from the buffer). */
static bool reads_shadow(const AmkPlan *plan, uint32_t t, uint32_t k) {
  const AmkPlanTask *pt = &plan->tasks[t];
  if (pt->op != AMK_OP_GEMV_TILE || !amk_inst_param_has(&pt->params, AMK_PARAM_flags))
    return false;
  switch ((uint32_t)pt->params.flags.i >> AMK_PATTERN_SHIFT) {
  case AMK_PATTERN_ATTENTION_ROPE:
    return k == 0;
  case AMK_PATTERN_COMBINE_RESIDUAL: /* fp weights: the quantized form reads no shadow */
    return !amk_inst_param_has(&pt->params, AMK_PARAM_qdtype) && (k == 0 || k >= 3) &&
           amk_inst_param_has(&pt->params, AMK_PARAM_head_dim) && pt->params.head_dim.i % 2 == 0;
  case AMK_PATTERN_MLP: /* fp weights: the quantized form reads no shadow */
    return k == 0 && !amk_inst_param_has(&pt->params, AMK_PARAM_qdtype) &&
           amk_inst_param_has(&pt->params, AMK_PARAM_K) && pt->params.K.i % 8 == 0;
  case AMK_PATTERN_ATTENTION_O:
    return false;
  default:
    return false;
  }
}

/* Compressed lists: items of key i are list[start[i] .. start[i + 1]). */
typedef struct {
  uint32_t *start, *list;
} Lists;

static void lists_free(Lists *l) {
  free(l->start);
  free(l->list);
}

/* The counters whose signallers' waits (of both kinds) name, per counter:
 * old (every wait) or new (waits for all signallers only), built the
 * first time a counter is reached, when its signallers are all decided. */
typedef struct {
  bool built;
  uint32_t n;
  uint32_t *to;
} Edges;

typedef struct {
  const AmkPlan *plan;
  uint32_t n_groups; /* pages, then one per unpaged buffer */
  Lists signallers;  /* per counter */
  Lists writers;     /* per buffer */
  Lists group_writers, group_accessors; /* per page group */
  AmkTransferWaits *old_waits;
  /* Reachability over counters: a visit stamp per counter, a stack. */
  uint32_t *stamp, *stack, now;
  Edges *old_edges, *new_edges; /* per counter */
  bool *in_old, *in_new; /* per counter, for the consumer being decided */
} Ctx;

static uint32_t group_of(const Ctx *x, uint32_t b) {
  int32_t page = x->plan->buffers[b].page;
  return page >= 0 ? (uint32_t)page : x->plan->n_pages + b;
}

/* Builds lists from (key, item) pairs produced by `each`, twice: counting,
 * then filling. */
typedef void (*PairFn)(const Ctx *x, uint32_t t, void (*emit)(void *, uint32_t, uint32_t),
                       void *arg);

typedef struct {
  Lists *l;
  uint32_t *fill;
  bool counting;
} Builder;

static void builder_emit(void *arg, uint32_t key, uint32_t item) {
  Builder *b = arg;
  if (b->counting)
    b->l->start[key + 1]++;
  else
    b->l->list[b->fill[key]++] = item;
}

static void build_lists(const Ctx *x, uint32_t n_keys, PairFn fn, Lists *out) {
  out->start = amk_xcalloc(n_keys + 1, sizeof *out->start);
  Builder b = {out, NULL, true};
  for (uint32_t t = 0; t < x->plan->n_tasks; t++)
    fn(x, t, builder_emit, &b);
  for (uint32_t k = 0; k < n_keys; k++)
    out->start[k + 1] += out->start[k];
  out->list = amk_xcalloc(out->start[n_keys] ? out->start[n_keys] : 1, sizeof *out->list);
  b.fill = amk_xcalloc(n_keys ? n_keys : 1, sizeof *b.fill);
  memcpy(b.fill, out->start, n_keys * sizeof *b.fill);
  b.counting = false;
  for (uint32_t t = 0; t < x->plan->n_tasks; t++)
    fn(x, t, builder_emit, &b);
  free(b.fill);
}

static void pair_signal(const Ctx *x, uint32_t t, void (*emit)(void *, uint32_t, uint32_t),
                        void *arg) {
  emit(arg, x->plan->tasks[t].counter, t);
}
static void pair_write(const Ctx *x, uint32_t t, void (*emit)(void *, uint32_t, uint32_t),
                       void *arg) {
  const AmkPlanTask *pt = &x->plan->tasks[t];
  for (uint32_t i = 0; i < pt->n_outputs; i++)
    emit(arg, pt->outputs[i], t);
}
static void pair_group_write(const Ctx *x, uint32_t t,
                             void (*emit)(void *, uint32_t, uint32_t), void *arg) {
  const AmkPlanTask *pt = &x->plan->tasks[t];
  for (uint32_t i = 0; i < pt->n_outputs; i++)
    emit(arg, group_of(x, pt->outputs[i]), t);
}
static void pair_group_access(const Ctx *x, uint32_t t,
                              void (*emit)(void *, uint32_t, uint32_t), void *arg) {
  const AmkPlanTask *pt = &x->plan->tasks[t];
  for (uint32_t i = 0; i < pt->n_inputs; i++)
    emit(arg, group_of(x, pt->inputs[i]), t);
  for (uint32_t i = 0; i < pt->n_outputs; i++)
    emit(arg, group_of(x, pt->outputs[i]), t);
}

/* Replaces each task of every list by its counter, each counter once per
 * list: the checks need only whether a counter is reached. */
static void lists_to_counters(const Ctx *x, uint32_t n_keys, Lists *l) {
  uint32_t *mark = amk_xcalloc(x->plan->n_counters ? x->plan->n_counters : 1, sizeof *mark);
  uint32_t out = 0;
  for (uint32_t k = 0; k < n_keys; k++) {
    uint32_t begin = l->start[k], end = l->start[k + 1];
    l->start[k] = out;
    for (uint32_t i = begin; i < end; i++) {
      uint32_t c = x->plan->tasks[l->list[i]].counter;
      if (mark[c] != k + 1) {
        mark[c] = k + 1;
        l->list[out++] = c;
      }
    }
  }
  l->start[n_keys] = out;
  free(mark);
}

static uint32_t n_signallers(const Ctx *x, uint32_t c) {
  return x->signallers.start[c + 1] - x->signallers.start[c];
}

static void edges_build(const Ctx *x, const AmkTransferWaits *all, bool partial_ok, uint32_t c,
                        Edges *e) {
  uint32_t cap = 0;
  for (uint32_t k = x->signallers.start[c]; k < x->signallers.start[c + 1]; k++) {
    const AmkTransferWaits *w = &all[x->signallers.list[k]];
    cap += w->n_blocking + w->n_at_signal;
  }
  e->to = amk_xcalloc(cap ? cap : 1, sizeof *e->to);
  e->n = 0;
  e->built = true;
  for (uint32_t k = x->signallers.start[c]; k < x->signallers.start[c + 1]; k++) {
    const AmkTransferWaits *w = &all[x->signallers.list[k]];
    for (uint32_t i = 0; i < (uint32_t)w->n_blocking + w->n_at_signal; i++) {
      bool blocking = i < w->n_blocking;
      uint32_t to = blocking ? w->counter[i] : w->signal_counter[i - w->n_blocking];
      uint32_t want = blocking ? w->threshold[i] : w->signal_threshold[i - w->n_blocking];
      if (!partial_ok && want < n_signallers(x, to))
        continue;
      bool have = false;
      for (uint32_t j = 0; j < e->n && !have; j++)
        have = e->to[j] == to;
      if (!have)
        e->to[e->n++] = to;
    }
  }
}

/* Marks in `seen` every counter reachable from the waits of `from` before
 * it runs. A wait for fewer than all signallers is followed only when
 * `partial_ok` (the old order: an over-estimate; the new: an under-one). */
static void reach(Ctx *x, const AmkTransferWaits *all, Edges *edges, const AmkTransferWaits *from,
                  bool partial_ok, bool *seen) {
  uint32_t top = 0;
  x->now++;
  for (uint32_t i = 0; i < from->n_blocking; i++)
    if (partial_ok || from->threshold[i] >= n_signallers(x, from->counter[i]))
      x->stack[top++] = from->counter[i];
  while (top > 0) {
    uint32_t c = x->stack[--top];
    if (x->stamp[c] == x->now)
      continue;
    x->stamp[c] = x->now;
    seen[c] = true;
    if (!edges[c].built)
      edges_build(x, all, partial_ok, c, &edges[c]);
    for (uint32_t j = 0; j < edges[c].n; j++)
      if (x->stamp[edges[c].to[j]] != x->now)
        x->stack[top++] = edges[c].to[j];
  }
}

static void clear_seen(const Ctx *x, bool *seen) {
  memset(seen, 0, x->plan->n_counters * sizeof *seen);
}

/* Adds a wait (the larger threshold where the counter is there already);
 * false when the list is full. */
static bool add_wait(uint32_t *counter, uint32_t *threshold, uint8_t *n, int cap, uint32_t c,
                     uint32_t want) {
  for (int i = 0; i < *n; i++)
    if (counter[i] == c) {
      if (threshold[i] < want)
        threshold[i] = want;
      return true;
    }
  if (*n >= cap)
    return false;
  counter[*n] = c;
  threshold[*n] = want;
  (*n)++;
  return true;
}

/* Tasks whose accesses conflict with C's, each checked: ordered before C in
 * the old waits implies in the new. */
static bool conflicts_kept(const Ctx *x, uint32_t t, const bool *shadow_input) {
  const AmkPlanTask *pt = &x->plan->tasks[t];
  for (uint32_t i = 0; i < pt->n_inputs + pt->n_outputs; i++) {
    bool input = i < pt->n_inputs;
    if (input && shadow_input[i])
      continue;
    uint32_t b = input ? pt->inputs[i] : pt->outputs[i - pt->n_inputs];
    uint32_t g = group_of(x, b);
    const Lists *l = input ? &x->group_writers : &x->group_accessors;
    for (uint32_t k = l->start[g]; k < l->start[g + 1]; k++) {
      uint32_t c = l->list[k]; /* the counter of a task touching the group */
      if (x->in_old[c] && !x->in_new[c])
        return false;
    }
  }
  return true;
}

/* Decides the hops into consumer t; updates its waits when any is tagged. */
static void decide(Ctx *x, AmkTransfers *out, uint32_t t) {
  const AmkPlan *plan = x->plan;
  const AmkPlanTask *pt = &plan->tasks[t];
  const AmkTransferWaits *old = &x->old_waits[t];
  if (pt->n_inputs > AMK_MAX_INPUTS || pt->wait_end - pt->wait_begin > AMK_MAX_WAITS)
    return; /* beyond the ABI's caps: the engine refuses it */
  bool shadow_input[AMK_MAX_INPUTS] = {false};
  bool tagged_counter[AMK_MAX_WAITS] = {false};
  int n_tagged = 0;
  for (uint32_t w = 0; w < old->n_blocking; w++) {
    uint32_t c = old->counter[w];
    uint32_t n_sig = n_signallers(x, c);
    if (n_sig == 0 || old->threshold[w] != n_sig)
      continue;
    bool ok = true, reads = false;
    bool takes[AMK_MAX_INPUTS] = {false};
    for (uint32_t k = x->signallers.start[c]; k < x->signallers.start[c + 1] && ok; k++) {
      uint32_t s = x->signallers.list[k];
      if (s >= t || !writes_shadow(plan, s)) {
        ok = false;
        break;
      }
      uint32_t b = plan->tasks[s].outputs[0];
      /* Nothing but c's signallers writes b. */
      for (uint32_t j = x->writers.start[b]; j < x->writers.start[b + 1]; j++)
        if (plan->tasks[x->writers.list[j]].counter != c)
          ok = false;
      for (uint32_t i = 0; i < pt->n_inputs && ok; i++)
        if (pt->inputs[i] == b) {
          if (!reads_shadow(plan, t, i))
            ok = false;
          takes[i] = true;
          reads = true;
        }
    }
    if (!ok || !reads)
      continue;
    for (uint32_t i = 0; i < pt->n_inputs; i++)
      shadow_input[i] = shadow_input[i] || takes[i];
    tagged_counter[w] = true;
    n_tagged++;
  }
  if (n_tagged == 0)
    return;
  /* Every input the variant would read through a shadow must have one. */
  for (uint32_t i = 0; i < pt->n_inputs; i++)
    if (reads_shadow(plan, t, i) && !shadow_input[i])
      return;
  AmkTransferWaits nw = {0};
  bool fits = true;
  for (uint32_t w = 0; w < old->n_blocking && fits; w++) {
    if (!tagged_counter[w]) {
      fits = add_wait(nw.counter, nw.threshold, &nw.n_blocking, AMK_MAX_WAITS, old->counter[w],
                      old->threshold[w]);
      continue;
    }
    uint32_t c = old->counter[w];
    fits = add_wait(nw.signal_counter, nw.signal_threshold, &nw.n_at_signal,
                    AMK_MAX_SIGNAL_WAITS, c, old->threshold[w]);
    for (uint32_t k = x->signallers.start[c]; k < x->signallers.start[c + 1] && fits; k++) {
      const AmkTransferWaits *pw = &out->waits[x->signallers.list[k]];
      for (uint32_t i = 0; i < pw->n_blocking && fits; i++)
        fits = add_wait(nw.counter, nw.threshold, &nw.n_blocking, AMK_MAX_WAITS, pw->counter[i],
                        pw->threshold[i]);
    }
  }
  if (!fits)
    return;
  clear_seen(x, x->in_old);
  clear_seen(x, x->in_new);
  reach(x, x->old_waits, x->old_edges, old, true, x->in_old);
  reach(x, out->waits, x->new_edges, &nw, false, x->in_new);
  if (!conflicts_kept(x, t, shadow_input))
    return;
  out->waits[t] = nw;
  out->tagged_reads[t] = true;
  out->n_consumers++;
  out->n_hops += (uint32_t)n_tagged;
  for (uint32_t i = 0; i < pt->n_inputs; i++)
    if (shadow_input[i])
      out->shadowed[pt->inputs[i]] = true;
}

static bool list_is_dependency_order(const Ctx *x) {
  const AmkPlan *plan = x->plan;
  for (uint32_t t = 0; t < plan->n_tasks; t++) {
    const AmkPlanTask *pt = &plan->tasks[t];
    for (uint32_t w = pt->wait_begin; w < pt->wait_end; w++) {
      uint32_t c = plan->wait_counter[w];
      for (uint32_t k = x->signallers.start[c]; k < x->signallers.start[c + 1]; k++)
        if (x->signallers.list[k] >= t)
          return false;
    }
  }
  return true;
}

void amk_cuda_transfers_plan(const AmkPlan *plan, bool enable, AmkTransfers *out) {
  memset(out, 0, sizeof *out);
  uint32_t n = plan->n_tasks;
  out->n_tasks = n;
  out->n_buffers = plan->n_buffers;
  out->shadowed = amk_xcalloc(plan->n_buffers ? plan->n_buffers : 1, sizeof *out->shadowed);
  out->tagged_reads = amk_xcalloc(n ? n : 1, sizeof *out->tagged_reads);
  out->waits = amk_xcalloc(n ? n : 1, sizeof *out->waits);
  for (uint32_t t = 0; t < n; t++) {
    const AmkPlanTask *pt = &plan->tasks[t];
    AmkTransferWaits *w = &out->waits[t];
    uint32_t k = pt->wait_end - pt->wait_begin;
    w->n_blocking = (uint8_t)(k < AMK_MAX_WAITS ? k : AMK_MAX_WAITS);
    for (uint32_t i = 0; i < w->n_blocking; i++) {
      w->counter[i] = plan->wait_counter[pt->wait_begin + i];
      w->threshold[i] = plan->wait_threshold[pt->wait_begin + i];
    }
  }
  if (!enable || plan->rows != 1 || n == 0)
    return;
  Ctx x = {.plan = plan, .n_groups = plan->n_pages + plan->n_buffers};
  build_lists(&x, plan->n_counters, pair_signal, &x.signallers);
  bool ordered = list_is_dependency_order(&x);
  if (ordered) {
    build_lists(&x, plan->n_buffers, pair_write, &x.writers);
    build_lists(&x, x.n_groups, pair_group_write, &x.group_writers);
    build_lists(&x, x.n_groups, pair_group_access, &x.group_accessors);
    lists_to_counters(&x, x.n_groups, &x.group_writers);
    lists_to_counters(&x, x.n_groups, &x.group_accessors);
    x.old_waits = amk_xmalloc(n * sizeof *x.old_waits);
    memcpy(x.old_waits, out->waits, n * sizeof *x.old_waits);
    uint32_t nc = plan->n_counters ? plan->n_counters : 1;
    x.stamp = amk_xcalloc(nc, sizeof *x.stamp);
    /* Each counter is pushed at most once per signaller wait, so the
     * stack holds at most every wait of every task. */
    /* A reach expands each counter once, pushing its edges: at most every
     * wait of every task, plus the consumer's own. */
    x.stack = amk_xcalloc((size_t)n * (AMK_MAX_WAITS + AMK_MAX_SIGNAL_WAITS) + AMK_MAX_WAITS,
                          sizeof *x.stack);
    x.in_old = amk_xcalloc(nc, sizeof *x.in_old);
    x.in_new = amk_xcalloc(nc, sizeof *x.in_new);
    x.old_edges = amk_xcalloc(nc, sizeof *x.old_edges);
    x.new_edges = amk_xcalloc(nc, sizeof *x.new_edges);
    for (uint32_t t = 0; t < n; t++)
      decide(&x, out, t);
    lists_free(&x.writers);
    lists_free(&x.group_writers);
    lists_free(&x.group_accessors);
    free(x.old_waits);
    free(x.stamp);
    free(x.stack);
    free(x.in_old);
    free(x.in_new);
    for (uint32_t c = 0; c < nc; c++) {
      free(x.old_edges[c].to);
      free(x.new_edges[c].to);
    }
    free(x.old_edges);
    free(x.new_edges);
  }
  lists_free(&x.signallers);
}

void amk_cuda_transfers_free(AmkTransfers *t) {
  if (!t)
    return;
  free(t->shadowed);
  free(t->tagged_reads);
  free(t->waits);
  memset(t, 0, sizeof *t);
}
